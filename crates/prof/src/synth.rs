//! Synthetic sessions of a chosen size, for the report's scale tests and
//! benchmarks (bench/prof/scale.py): `rows` rows of profile.tsv over
//! `stacks` distinct call stacks of `depth` frames, on real ELF images (so
//! the report symbolizes real functions, as on a real recording).
//!
//! Mechanism: the functions of the images' symbol tables (read with
//! `object`) are the frames; stack i copies the outermost part of an
//! earlier stack (real programs' stacks share their roots: `main`, the
//! event loop) and continues with random functions, so the stacks form a
//! tree, as a profile's do; each stack is used by `rows / stacks` rows of
//! distinct (tid, cpu), each with a random leaf. Written streaming: the
//! generator holds the stack table (4 bytes per frame) and nothing per row.
//! Deterministic for a seed (xorshift).

use crate::model::{Image, ImageKind, Meta, Process};
use object::{Object, ObjectSegment, ObjectSymbol};
use std::collections::HashSet;
use std::io::{BufWriter, Write};
use std::path::Path;

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthOpts {
    pub rows: u64,
    pub stacks: u32,
    pub depth: u32,
    pub seed: u64,
    /// Real ELF files whose functions are the frames.
    pub images: Vec<String>,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A function of an image: its file offset and size.
#[derive(Clone, Copy)]
struct Func {
    image: u32,
    offset: u64,
    size: u64,
}

fn functions(path: &str, image: u32) -> std::io::Result<Vec<Func>> {
    let data = std::fs::read(path)?;
    let f = object::File::parse(&*data)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    let segs: Vec<(u64, u64, u64)> = f
        .segments()
        .map(|s| (s.address(), s.size(), s.file_range().0))
        .collect();
    let mut v: Vec<Func> = f
        .symbols()
        .chain(f.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() >= 16)
        .filter_map(|s| {
            let (va, _, off) = segs
                .iter()
                .find(|(a, sz, _)| s.address() >= *a && s.address() < a + sz)?;
            Some(Func {
                image,
                offset: s.address() - va + off,
                size: s.size(),
            })
        })
        .collect();
    v.sort_by_key(|f| f.offset);
    v.dedup_by_key(|f| f.offset);
    Ok(v)
}

/// Writes a session of `o`'s size at `dir` (which must not exist).
pub fn write(dir: &Path, o: &SynthOpts) -> std::io::Result<()> {
    let mut funcs = Vec::new();
    for (i, p) in o.images.iter().enumerate() {
        funcs.extend(functions(p, i as u32)?);
    }
    if funcs.is_empty() {
        return Err(std::io::Error::other("no functions in the images"));
    }
    std::fs::create_dir(dir)?;
    let mut rng = Rng(o.seed | 1);
    let depth = o.depth.max(1) as usize;
    let images: Vec<Image> = o
        .images
        .iter()
        .map(|p| Image::named(p, ImageKind::Elf))
        .collect();
    std::fs::write(
        dir.join("images.json"),
        serde_json::to_vec(&images).expect("serializable"),
    )?;
    let pids: Vec<u32> = (0..8).map(|i| 1000 + i * 100).collect();
    let procs: Vec<Process> = pids
        .iter()
        .map(|&pid| {
            let mut p = Process::default();
            p.pid = pid;
            p.comm = format!("synth{pid}");
            p.exe = Some(o.images[0].clone());
            p
        })
        .collect();
    std::fs::write(
        dir.join("processes.json"),
        serde_json::to_vec(&procs).expect("serializable"),
    )?;
    std::fs::write(dir.join("tags.json"), b"[]")?;
    std::fs::write(
        dir.join("mappings.tsv"),
        b"# pid\tstart\tend\tpgoff\tbuild_id\tpath\n",
    )?;

    // the stacks: function indices, outermost first, in one arena
    let mut arena: Vec<u32> = Vec::with_capacity(o.stacks as usize * depth);
    let mut seen: HashSet<u64> = HashSet::new();
    let mut st = BufWriter::new(std::fs::File::create(dir.join("stacks.tsv"))?);
    writeln!(st, "# id\tframes (image:offset, nearest caller first)")?;
    let mut s = vec![0u32; depth];
    let mut id = 0u32;
    while id < o.stacks {
        // one stack in 1000 starts afresh (another thread's root)
        if id.is_multiple_of(1000) {
            for f in s.iter_mut() {
                *f = rng.below(funcs.len() as u64) as u32;
            }
        } else {
            let from = rng.below(id as u64) as usize * depth;
            // keep between a quarter and all but one of the frames
            let keep = depth / 4 + rng.below((depth - depth / 4) as u64) as usize;
            s[..keep].copy_from_slice(&arena[from..from + keep]);
            for f in s[keep..].iter_mut() {
                *f = rng.below(funcs.len() as u64) as u32;
            }
        }
        let h = s.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &f| {
            (h ^ f as u64).wrapping_mul(0x100_0000_01b3)
        });
        if !seen.insert(h) {
            continue;
        }
        arena.extend_from_slice(&s);
        id += 1;
        write!(st, "{id}\t")?;
        // nearest caller first; a return address inside the caller
        for (i, &f) in s.iter().rev().enumerate() {
            let fu = funcs[f as usize];
            let sep = if i == 0 { "" } else { "," };
            write!(
                st,
                "{sep}{}:{:x}",
                fu.image,
                fu.offset + 1 + (f as u64 % (fu.size - 1))
            )?;
        }
        writeln!(st)?;
    }
    st.flush()?;
    drop(seen);

    let mut pr = BufWriter::new(std::fs::File::create(dir.join("profile.tsv"))?);
    writeln!(
        pr,
        "# pid\ttid\tcpu\tmode\timage\toffset\ttags\tcount\tstack"
    )?;
    let mut samples = 0u64;
    for i in 0..o.rows {
        let stack = (i % o.stacks.max(1) as u64) as u32 + 1;
        let round = i / o.stacks.max(1) as u64;
        let pid = pids[(stack as usize) % pids.len()];
        let leaf = funcs[rng.below(funcs.len() as u64) as usize];
        let count = 1 + rng.below(4);
        samples += count;
        writeln!(
            pr,
            "{pid}\t{}\t{}\tu\t{}\t{:x}\t0\t{count}\t{stack}",
            pid as u64 + round / 2,
            round % 2,
            leaf.image,
            leaf.offset + rng.below(leaf.size),
        )?;
    }
    pr.flush()?;
    let meta = Meta {
        format: crate::session::FORMAT,
        event: "cpu-clock".into(),
        freq: Some(4000),
        target: "synthetic".into(),
        cpus: 2,
        samples,
        transport: "aggregate".into(),
        stacks: "perf".into(),
        ..Default::default()
    };
    std::fs::write(
        dir.join("meta.json"),
        serde_json::to_vec_pretty(&meta).expect("serializable"),
    )?;
    Ok(())
}
