//! The fast path's getppid round trip (guest → executive → guest), for
//! issue 10's Table 1 and for a quick look:
//!
//! ```text
//! cargo run --release -p mantle-exec --example fast_getppid -- \
//!     [--calls N] [--guest-cpu C] [--exec-cpu C] [--guest-spin N]
//!     [--exec-spin MICROSECONDS] [--continue] [--plain] [--other] [--dma] [--rewrite]
//! ```
//!
//! It builds the timer guest (`tests/guests/rt.c`) with `cc`, pins the
//! guest and the executive (sched_setaffinity) as asked, and prints the
//! guest's own measurement: mean, median, p99 and max in ns over N calls,
//! and the executive's one-way figure (guest posts the request → the
//! executive picks it up, from the guest's TSC stamp).
//! Default: the agent answers getppid with a value (`Decision::Return`);
//! `--continue` lets the guest make the call itself and report (the
//! interposition case); `--plain` runs the guest without the executive;
//! `--other` times getpid instead, which the stub traps but the executive
//! does not want (the trap's own cost; with `--plain`, a plain getpid);
//! `--dma` holds `/dev/cpu_dma_latency` at 0 during the run (root);
//! `--rewrite` lets the stub rewrite the trapped call sites (no signal);
//! `--no-one-way` does not record the one-way samples.

use mantle_exec::fast::{serve_child, spawn_fast, FastOptions};
use mantle_exec::{Agent, Call, Chain, Decision, Guest, Sysno};
use std::path::PathBuf;
use std::process::{Command, Stdio};

struct Ppid(bool);
impl Agent for Ppid {
    fn name(&self) -> &str {
        "ppid"
    }
    fn wants(&self) -> Vec<Sysno> {
        Sysno::from_name("getppid").into_iter().collect()
    }
    fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
        if self.0 {
            Decision::Continue
        } else {
            Decision::Return(4242)
        }
    }
}

fn pin(pid: u32, cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(pid as i32, size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!(
                "sched_setaffinity({pid}, cpu {cpu}): {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

fn main() {
    let mut calls = 100_000u64;
    let (mut gcpu, mut ecpu) = (None, None);
    let (mut cont, mut plain, mut other, mut dma) = (false, false, false, false);
    let mut opts = FastOptions::default();
    let mut spins_set = false;
    let mut no_one_way = false;
    let mut a = std::env::args().skip(1);
    while let Some(x) = a.next() {
        let mut num = || {
            a.next()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("a number")
        };
        match x.as_str() {
            "--calls" => calls = num(),
            "--guest-cpu" => gcpu = Some(num() as usize),
            "--exec-cpu" => ecpu = Some(num() as usize),
            "--guest-spin" => {
                opts.guest_spin = num() as u32;
                spins_set = true
            }
            "--exec-spin" => {
                opts.exec_spin = std::time::Duration::from_micros(num());
                spins_set = true
            }
            "--continue" => cont = true,
            "--plain" => plain = true,
            "--other" => other = true,
            "--dma" => dma = true,
            "--rewrite" => opts.rewrite = true,
            "--no-one-way" => no_one_way = true,
            _ => {
                eprintln!("usage: fast_getppid [--calls N] [--guest-cpu C] [--exec-cpu C] [--guest-spin N] [--exec-spin MICROSECONDS] [--continue] [--plain] [--other] [--dma] [--rewrite] [--no-one-way]");
                std::process::exit(2);
            }
        }
    }
    // held open (value 0) for the whole run: idle CPUs poll instead of
    // halting, which makes cross-CPU wake-ups cheap on this machine
    let _dma = dma.then(|| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .expect("open /dev/cpu_dma_latency (root)");
        f.write_all(&0i32.to_ne_bytes())
            .expect("write /dev/cpu_dma_latency");
        f
    });
    // TSC ticks per ns, for the one-way samples
    let ghz = {
        let (t0, i0) = (mantle_exec::fast::server::tsc(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (t1, i1) = (mantle_exec::fast::server::tsc(), std::time::Instant::now());
        (t1 - t0) as f64 / (i1 - i0).as_nanos() as f64
    };
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/guests/rt.c");
    let bin = std::env::temp_dir().join(format!("mantle-fast-rt-{}", std::process::id()));
    let st = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success(), "cc {}", src.display());
    let mut cmd = vec![bin.display().to_string(), calls.to_string()];
    if other {
        // getpid: trapped by the stub but not wanted, made directly (the
        // cost of the trap alone)
        cmd.push(libc::SYS_getpid.to_string());
    }
    if let Some(c) = ecpu {
        pin(0, c);
    }
    let mode = if other {
        "fast path, getpid: trapped, not wanted, made by the stub"
    } else if plain {
        "plain getppid (no executive)"
    } else if cont {
        "fast path, continue (guest performs, reports)"
    } else {
        "fast path, executive answers"
    };
    let out = if plain {
        let mut c = Command::new(&bin);
        c.args(&cmd[1..]).stdout(Stdio::inherit());
        let mut ch = c.spawn().expect("spawn");
        if let Some(g) = gcpu {
            pin(ch.id(), g);
        }
        ch.wait().expect("wait")
    } else {
        if !spins_set && gcpu.is_some() && gcpu == ecpu {
            // one CPU: a spinning side only delays the other
            opts.guest_spin = 0;
            opts.exec_spin = std::time::Duration::ZERO;
        }
        let chain = Chain::new(vec![Box::new(Ppid(cont))]);
        let (child, mut server) = spawn_fast(&cmd, chain, &opts).expect("spawn_fast");
        if !no_one_way {
            server.record_one_way(calls as usize + 1000);
        }
        if let Some(g) = gcpu {
            pin(child.id(), g);
        }
        let (st, stats) = serve_child(child, &mut server, &opts).expect("serve");
        eprintln!("executive: {stats:?}");
        let mut w: Vec<u64> = server.one_way().iter().skip(1000).copied().collect();
        if !w.is_empty() {
            w.sort_unstable();
            let ns = |t: u64| (t as f64 / ghz) as u64;
            let n = w.len();
            println!(
                "one-way (guest posts -> executive sees): n={n} median={} p99={} max={}",
                ns(w[n / 2]),
                ns(w[n * 99 / 100]),
                ns(w[n - 1])
            );
        }
        st
    };
    let _ = std::fs::remove_file(&bin);
    eprintln!(
        "mode: {mode}; guest cpu {gcpu:?}, executive cpu {ecpu:?}; spins guest {} executive {:?}; cpu_dma_latency held: {dma}; rewrite: {}; status {out:?}",
        opts.guest_spin, opts.exec_spin, opts.rewrite
    );
}
