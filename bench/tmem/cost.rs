//! The TMEM policy's own cost (issue 30, "Period and cost"; the paper's
//! 0.2% at a 250 ms period, §V-B), in two parts measured in one run:
//!
//! 1. The pure core (`tmem::Tmem::run`) on synthetic snapshots across
//!    |C| (virtual components) × |T| (real-time threads) × M (units), built
//!    so that the algorithm moves units every run (every cache asks for
//!    more than it holds, every thread is tardy): the O(M·|C|·|T|) curve.
//! 2. A whole policy run (`Manager::run_policy`: the snapshot read from
//!    the regions and CBUF tables in shared memory, the tardiness checks,
//!    the policy, `set_desired`) on a running system the size of the
//!    paper's Figure 8: 15 components (5 real-time, 5 shared, 5
//!    best-effort subsystem), each with a stack and a CBUF cache (30
//!    virtual components), the tmem policy. Its CPU share is the run's
//!    time over the 250 ms period, the bar (<= 0.5%).
//!
//! Side-by-side floor: a `getppid` system call, timed in the same run, so
//! the figures compare between machines as multiples of it.
//! Env: TMEM_COST_REPS (default 200), TMEM_COST_JSON (output path).
//! Pinning: run.sh pins the process and its components to CPU 0.

use std::time::{Duration, Instant};

use mantle_comp::policy::{CacheView, Kind, Policy, Snapshot, ThreadBlock};
use mantle_comp::tmem::{Tardiness, Tmem};
use mantle_comp::{Manager, SystemFile};

const DEMO: &str = env!("CARGO_BIN_EXE_mantle-comp-demo");

struct Stats {
    median: f64,
    p99: f64,
    max: f64,
    min: f64,
}

fn stats(mut v: Vec<f64>) -> Stats {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    Stats {
        median: at(0.5),
        p99: at(0.99),
        max: *v.last().unwrap_or(&0.0),
        min: v[0],
    }
}

/// A snapshot of `c` virtual components (stack type), `t` real-time
/// threads, `m` units in the pool: half of them held, every cache asking
/// for twice what it holds, every thread tardy and blocked in 1/4 of the
/// caches (seeded).
fn synthetic(c: usize, t: usize, m: u32, seed: u64) -> Snapshot {
    let mut x = seed | 1;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n.max(1)
    };
    let held = (m / 2 / c as u32).max(1);
    let mut s = Snapshot {
        pool: [(Kind::Stack, m)].into(),
        minimum: 1,
        tardiness: Tardiness(
            (1..=t as u32)
                .map(|i| (i, 1_000_000 + rnd(50_000_000)))
                .collect(),
        ),
        ..Default::default()
    };
    for j in 0..c {
        let mut per = Vec::new();
        for i in 1..=t as u32 {
            if rnd(4) == 0 {
                per.push(ThreadBlock {
                    tid: i,
                    blocks: 1,
                    block_ns: 1_000_000 + rnd(20_000_000),
                });
            }
        }
        s.caches.insert(
            (format!("c{j}"), Kind::Stack),
            CacheView {
                allocated: held,
                desired: held,
                max: m,
                estimated_requests: 2 * held + rnd(held as u64 + 1) as u32,
                per_thread: per,
                ..Default::default()
            },
        );
    }
    s
}

fn floor_ns(reps: usize) -> f64 {
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        // SAFETY: getppid has no arguments and cannot fail.
        std::hint::black_box(unsafe { libc::getppid() });
        v.push(t.elapsed().as_nanos() as f64);
    }
    stats(v).median
}

fn figure8() -> SystemFile {
    let mut t = String::from(
        "[limits]\nstacks=120\ncbuf_pages=2048\n[policy]\nname='tmem'\nperiod_ms=250\n",
    );
    for sub in ["rt", "sh", "be"] {
        for k in 0..5 {
            t += &format!(
                "[[component]]\nname='{sub}{k}'\nexec=['{DEMO}','echo']\nstacks=2\nmax_stacks=8\ncbuf_kib=1024\n"
            );
        }
    }
    SystemFile::parse(&t).expect("the Figure 8 system file")
}

fn main() {
    let reps: usize = std::env::var("TMEM_COST_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let floor = floor_ns(100_000);
    println!("floor: getppid median {floor:.0} ns (same run)");
    let mut rows = Vec::new();
    println!(
        "\n{:>4} {:>4} {:>6} {:>7} {:>12} {:>12} {:>12} {:>10}",
        "|C|", "|T|", "M", "moves", "median ns", "p99 ns", "max ns", "ns/(M|C||T|)"
    );
    for &c in &[4usize, 8, 16, 32, 64] {
        for &t in &[4usize, 8, 16, 32] {
            for &m in &[64u32, 256, 1024] {
                let s = synthetic(c, t, m, (c * 1000 + t * 10) as u64 + m as u64);
                let mut p = Tmem::new(true);
                let mut v = Vec::with_capacity(reps);
                for _ in 0..reps {
                    let t0 = Instant::now();
                    std::hint::black_box(p.run(std::hint::black_box(&s)));
                    v.push(t0.elapsed().as_nanos() as f64);
                }
                let st = stats(v);
                let work = m as f64 * c as f64 * t as f64;
                println!(
                    "{c:>4} {t:>4} {m:>6} {:>7} {:>12.0} {:>12.0} {:>12.0} {:>10.3}",
                    p.moves,
                    st.median,
                    st.p99,
                    st.max,
                    st.median / work
                );
                rows.push(serde_json::json!({
                    "c": c, "t": t, "m": m, "moves": p.moves,
                    "median_ns": st.median, "p99_ns": st.p99, "max_ns": st.max, "min_ns": st.min,
                }));
            }
        }
    }

    // the whole run on a running Figure 8-sized system
    let mut m = Manager::up(figure8()).expect("start the Figure 8 system");
    // real-time load: 8 threads, 2 per real-time component, each a call
    // and a tardiness report, so the run has threads and tardiness to read
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for k in 0..8usize {
        let s = m.server(&format!("rt{}", k % 5)).expect("rt server");
        let stop = stop.clone();
        load.push(std::thread::spawn(move || {
            let _ = mantle_sys::supervise::set_fifo(10 + k as i32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = s.invoke(1, &[2]);
                let _ = s.invoke(11, &[500]);
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        std::thread::sleep(Duration::from_millis(2));
        let t0 = Instant::now();
        std::hint::black_box(m.run_policy());
        v.push(t0.elapsed().as_nanos() as f64);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in load {
        let _ = l.join();
    }
    let st = stats(v);
    let period = 250e6;
    let runs = m.status().policy.runs;
    let tardy = m.history().filter(|r| !r.tardiness.is_empty()).count();
    println!(
        "\nFigure 8-sized system (15 components x 2 types, 8 real-time threads, tmem, {reps} runs, {tardy} of the last {} with tardiness):",
        m.history().count()
    );
    println!(
        "  run_policy median {:.0} ns, p99 {:.0} ns, max {:.0} ns = {:.0} / {:.0} getppid",
        st.median,
        st.p99,
        st.max,
        st.median / floor,
        st.p99 / floor
    );
    println!(
        "  CPU share at a 250 ms period: median {:.4}%, p99 {:.4}%, max {:.4}% (bar: <= 0.5%)",
        st.median / period * 100.0,
        st.p99 / period * 100.0,
        st.max / period * 100.0
    );
    let _ = runs;
    if let Ok(path) = std::env::var("TMEM_COST_JSON") {
        let out = serde_json::json!({
            "floor_getppid_ns": floor,
            "pure": rows,
            "figure8": {
                "reps": reps, "median_ns": st.median, "p99_ns": st.p99, "max_ns": st.max,
                "share_median_pct": st.median / period * 100.0,
                "share_p99_pct": st.p99 / period * 100.0,
            },
        });
        std::fs::write(&path, serde_json::to_vec_pretty(&out).unwrap_or_default())
            .expect("write the json");
    }
}
