//! Writes a synthetic session (mantle_prof::synth) for the report's scale
//! benchmark (bench/prof/scale.py):
//! `synth DIR ROWS STACKS DEPTH [SEED] [ELF...]` (default ELF: libc).

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 4 {
        eprintln!("usage: synth DIR ROWS STACKS DEPTH [SEED] [ELF...]");
        std::process::exit(2);
    }
    let num = |i: usize| -> u64 {
        a[i].parse().unwrap_or_else(|_| {
            eprintln!("synth: {:?} is not a number", a[i]);
            std::process::exit(2)
        })
    };
    let mut images: Vec<String> = a.iter().skip(5).cloned().collect();
    if images.is_empty() {
        images.push("/usr/lib/x86_64-linux-gnu/libc.so.6".into());
    }
    let o = mantle_prof::synth::SynthOpts {
        rows: num(1),
        stacks: num(2) as u32,
        depth: num(3) as u32,
        seed: if a.len() > 4 { num(4) } else { 1 },
        images,
    };
    if let Err(e) = mantle_prof::synth::write(std::path::Path::new(&a[0]), &o) {
        eprintln!("synth: {}: {e}", a[0]);
        std::process::exit(1);
    }
}
