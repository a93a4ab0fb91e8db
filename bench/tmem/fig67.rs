//! Figures 6 and 7 of the TMEM paper (seeds/003 §VI-B) on mantle's real
//! runtime: the Figure 8 system as 15 component processes
//! (`mantle-comp-demo fig8`), real context threads, the real stack and
//! CBUF managers, and the real policy loop (`Manager::tick`), with every
//! policy run side by side in one invocation.
//!
//! The system (our reading of Figure 8; the figure itself is not in the
//! text we have, so the graph is ours, with the paper's rules):
//! a real-time subsystem r0..r4, a best-effort one b0..b4 and a shared
//! one s0..s4. Invocations go downward; a component invokes the child
//! toward the line between the two sides with 75% chance and the other
//! with 25%; s0, s2 and s4 are on the line and choose 50/50 (s2: s4 or
//! nobody; s4 is the leaf). Real-time threads enter at r0/r1, best-effort
//! ones at b0/b1. At each component a job spins 10% of its e_i of CPU
//! time, allocates a 64-byte CBUF (a one-page slab: see RESULTS.md on `min`)
//! and passes it to the next, which maps it;
//! where the walk ends, the rest of e_i is spent.
//!
//! Task sets (seeded): 8 real-time threads, periods from an exponential
//! distribution around 100 ms (clamped to 20..400 ms), utilisations from
//! an exponential around 0.8/8 scaled so they sum to 0.8, e_i = p_i·u_i,
//! rate-monotonic SCHED_FIFO priorities 60..67 (above the FIFO 5..30 of the
//! repository's real-time tests). Each job reports its
//! tardiness (max(0, completion − deadline)) to its entry component
//! (f1), which is what the policy reads.
//!
//! Scaled to this 2-CPU VM: the components and the real-time threads run
//! on CPU 0 (the paper's uniprocessor); the manager's policy loop ticks
//! every 5 ms on CPU 1 at SCHED_FIFO 1. Each run is a fresh system.
//!
//! Figure 6: real-time threads only; the stack pool is the 15 contexts of
//! the minimum (1 per component) plus EXTRA (the x axis, in contexts of
//! 256 KiB stack each); the CBUF pool is each component's one-slab
//! minimum (64 pages each: P3), so the schedulable memory is the stacks.
//! Each (task set, extra, policy) run: WARM s, then SECS s measured:
//! per second the maximum tardiness and the deadlines missed, averaged
//! over the seconds (the paper's reading), plus the run's overall max.
//! `min` and `max` (pool = every bound) are the references.
//!
//! Figure 7: an open system: the same real-time threads, and 8
//! best-effort threads (SCHED_OTHER, on CPU 0 too) that run jobs through
//! b0/b1 from T7/3 to 2·T7/3; per second the memory in use (Σ a^j of the
//! stack caches), the maximum tardiness, the deadlines missed.
//!
//! Env: TMEM_FIG_SETS (3), TMEM_FIG_SECS (3), TMEM_FIG_WARM (1),
//! TMEM_FIG_EXTRA ("0,8,16,32"), TMEM_FIG7_SECS (15), TMEM_FIG7_EXTRA (32),
//! TMEM_FIG_JSON (output path), TMEM_FIG_PERIOD_MS (250), TMEM_FIG_PRIO (67:
//! the highest task priority), TMEM_FIG_BE_CPU (0), TMEM_FIG7_POLICIES
//! ("min,max,fair,greedy,tmem,tmem-nopi"), TMEM_FIG_TRACE (set: every policy
//! run on stderr: what Algorithm 1 saw).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mantle_comp::{Manager, SystemFile};

const DEMO: &str = env!("CARGO_BIN_EXE_mantle-comp-demo");
const MAX_STACKS: u32 = 16;
const NCOMP: u32 = 15;

/// The Figure 8 graph: (component, [(child, percent)]).
const GRAPH: &[(&str, &[(&str, u32)])] = &[
    ("r0", &[("r2", 75), ("r3", 25)]),
    ("r1", &[("r2", 75), ("r3", 25)]),
    ("r2", &[("s0", 75), ("r4", 25)]),
    ("r3", &[("r2", 75), ("r4", 25)]),
    ("r4", &[("s1", 75), ("s0", 25)]),
    ("b0", &[("b2", 75), ("b3", 25)]),
    ("b1", &[("b2", 75), ("b3", 25)]),
    ("b2", &[("s0", 75), ("b4", 25)]),
    ("b3", &[("b2", 75), ("b4", 25)]),
    ("b4", &[("s3", 75), ("s0", 25)]),
    ("s0", &[("s1", 50), ("s3", 50)]),
    ("s1", &[("s2", 75), ("s4", 25)]),
    ("s3", &[("s2", 75), ("s4", 25)]),
    ("s2", &[("s4", 50)]),
    ("s4", &[]),
];

fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn system(policy: &str, stacks: u32, period_ms: u64) -> SystemFile {
    let mut t = format!(
        "[limits]\nstacks={stacks}\ncbuf_pages={}\n[policy]\nname='{policy}'\nperiod_ms={period_ms}\n",
        NCOMP * 64
    );
    for (name, kids) in GRAPH {
        let args: Vec<String> = kids.iter().map(|(c, p)| format!("'{c}:{p}'")).collect();
        let inv: Vec<String> = kids.iter().map(|(c, _)| format!("'{c}'")).collect();
        t += &format!(
            "[[component]]\nname='{name}'\nexec=['{DEMO}','fig8',{}]\ninvokes=[{}]\n\
             stacks=1\nmax_stacks={MAX_STACKS}\ncbuf_kib=256\n",
            args.join(","),
            inv.join(",")
        );
    }
    SystemFile::parse(&t).expect("the Figure 8 system file")
}

#[derive(Debug, Clone)]
struct Task {
    period: Duration,
    budget_us: u64,
    prio: i32,
    top: &'static str,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.next()).ln()
    }
}

fn taskset(seed: u64) -> Vec<Task> {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    for _ in 0..8 {
        r.next();
    }
    let periods: Vec<f64> = (0..8).map(|_| r.exp(100.0).clamp(20.0, 400.0)).collect();
    let us: Vec<f64> = (0..8).map(|_| r.exp(0.1).max(0.005)).collect();
    let sum: f64 = us.iter().sum();
    let mut idx: Vec<usize> = (0..8).collect();
    idx.sort_by(|&a, &b| periods[a].total_cmp(&periods[b]));
    let mut tasks = Vec::new();
    for (rank, &i) in idx.iter().enumerate() {
        let u = us[i] * 0.8 / sum;
        tasks.push(Task {
            period: Duration::from_micros((periods[i] * 1000.0) as u64),
            budget_us: (periods[i] * 1000.0 * u) as u64,
            prio: env("TMEM_FIG_PRIO", 67) - rank as i32,
            top: if i % 2 == 0 { "r0" } else { "r1" },
        });
    }
    tasks
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; cpu < CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: set is a valid cpu_set_t of the size passed; 0 = this thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
}

/// Other real-time work on the machine (SCHED_FIFO/RR/DEADLINE threads
/// outside the processes in `ours`): it competes with the task set for
/// the CPUs and for the kernel's real-time budget (950 ms a second), and a
/// shared machine has it. Sampled from /proc/PID/task/TID/stat every few
/// hundred ms: the CPU time of each such thread since it was first seen
/// (since its start, for one started during the run).
struct ForeignRt {
    ours: Vec<u32>,
    /// the run's start, in clock ticks since boot
    start: u64,
    seen: std::collections::HashMap<u32, u64>,
    ticks: u64,
}

fn ticks_since_boot(hz: f64) -> u64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |s| (s * hz) as u64)
}

fn hz() -> f64 {
    // SAFETY: sysconf has no memory arguments.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

impl ForeignRt {
    fn new(ours: Vec<u32>) -> ForeignRt {
        let mut f = ForeignRt {
            ours,
            start: ticks_since_boot(hz()),
            seen: Default::default(),
            ticks: 0,
        };
        f.sample();
        f.ticks = 0;
        f
    }

    fn sample(&mut self) {
        for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if self.ours.contains(&pid) {
                continue;
            }
            for t in std::fs::read_dir(p.path().join("task"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                    continue;
                };
                let Ok(st) = std::fs::read_to_string(t.path().join("stat")) else {
                    continue;
                };
                let Some((_, rest)) = st.rsplit_once(')') else {
                    continue;
                };
                // fields from 3 (state) on: utime 14, stime 15,
                // starttime 22, policy 41
                let f: Vec<&str> = rest.split_whitespace().collect();
                let num = |i: usize| {
                    f.get(i - 3)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                if !matches!(num(41), 1 | 2 | 6) {
                    continue;
                }
                let now = num(14) + num(15);
                let before = match self.seen.get(&tid) {
                    Some(&b) => b,
                    None if num(22) >= self.start => 0,
                    None => now,
                };
                self.ticks += now.saturating_sub(before);
                self.seen.insert(tid, now);
            }
        }
    }

    /// CPUs' worth of other real-time work over `secs`.
    fn share(&self, secs: f64) -> f64 {
        self.ticks as f64 / hz() / secs.max(1e-9)
    }
}

/// One job's end: when (since the run's start) and its tardiness.
#[derive(Clone, Copy)]
struct Job {
    at: Duration,
    tardy: Duration,
}

struct Run {
    jobs: Vec<Job>,
    /// (time since start, Σ a^j of the stack caches)
    memory: Vec<(Duration, u32)>,
    errors: u64,
    /// CPUs' worth of other real-time work during the run (see
    /// [`ForeignRt`]): above a few percent the run is disturbed.
    foreign_rt: f64,
}

/// A run of `secs` seconds: the real-time task set, best-effort threads
/// between `be` (if any), the policy loop ticking on CPU 1.
fn run(
    policy: &str,
    stacks: u32,
    tasks: &[Task],
    secs: f64,
    be: Option<(f64, f64)>,
    period_ms: u64,
) -> Run {
    pin(0);
    let mut m = Manager::up(system(policy, stacks, period_ms)).expect("start the Figure 8 system");
    pin(1);
    let _ = mantle_sys::supervise::set_fifo(1);
    let mut ours: Vec<u32> = m.pids().values().copied().collect();
    ours.push(std::process::id());
    let mut foreign = ForeignRt::new(ours);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let jobs = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut threads = Vec::new();
    for (k, t) in tasks.iter().enumerate() {
        let s = m.server(t.top).expect("entry server");
        let (t, stop, jobs, errors) = (t.clone(), stop.clone(), jobs.clone(), errors.clone());
        threads.push(std::thread::spawn(move || {
            pin(0);
            mantle_sys::supervise::set_fifo(t.prio).expect("SCHED_FIFO (root)");
            if trace() {
                eprintln!(
                    "trace: tid {} FIFO {} period {:?} e {} us",
                    mantle_sys::os::gettid(),
                    t.prio,
                    t.period,
                    t.budget_us
                );
            }
            let mut release = start + Duration::from_millis(20);
            let mut seed = k as u64 * 7919 + 1;
            let mut mine = Vec::new();
            while release < end && !stop.load(Relaxed) {
                let now = Instant::now();
                if release > now {
                    std::thread::sleep(release - now);
                }
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = s.invoke(0, &[t.budget_us, (t.budget_us / 10).max(1), seed >> 1, 0]);
                if !matches!(r, Ok(v) if v > 0) {
                    errors.fetch_add(1, Relaxed);
                }
                let done = Instant::now();
                let tardy = done.saturating_duration_since(release + t.period);
                let _ = s.invoke(1, &[tardy.as_micros() as u64]);
                mine.push(Job {
                    at: done - start,
                    tardy,
                });
                release += t.period;
            }
            jobs.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
        }));
    }
    if let Some((from, to)) = be {
        for k in 0..8u64 {
            let s = m
                .server(if k % 2 == 0 { "b0" } else { "b1" })
                .expect("be server");
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                pin(env("TMEM_FIG_BE_CPU", 0));
                // A spawned thread inherits its creator's policy, and this
                // one's creator runs the policy loop at SCHED_FIFO 1. Before
                // this line the "best-effort" threads were FIFO 1: with the
                // task set they left no CPU 0 time to SCHED_OTHER, so the
                // kernel's fair server (Linux >= 6.12: 50 ms a second for
                // starved SCHED_OTHER tasks, above every FIFO priority) ran
                // the machine's other work once a second for 49-53 ms ahead
                // of the real-time threads (perf sched trace, RESULTS.md):
                // the 14-33 misses a second of every policy, `max` included.
                mantle_sys::pifutex::set_self_sched(mantle_sys::pifutex::Sched {
                    policy: libc::SCHED_OTHER,
                    value: 0,
                })
                .expect("best-effort threads run SCHED_OTHER");
                let (from, to) = (
                    start + Duration::from_secs_f64(from),
                    start + Duration::from_secs_f64(to),
                );
                let now = Instant::now();
                if from > now {
                    std::thread::sleep(from - now);
                }
                let mut seed = k * 31 + 5;
                while Instant::now() < to && !stop.load(Relaxed) {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let _ = s.invoke(0, &[5000, 500, seed >> 1, 0]);
                    std::thread::sleep(Duration::from_millis(2));
                }
            }));
        }
    }
    let mut memory = Vec::new();
    let mut last_sample = start;
    let mut samples = 0u64;
    let mut traced = 0;
    while Instant::now() < end {
        m.tick();
        if trace() {
            trace_run(&m, &mut traced, start);
        }
        if last_sample.elapsed() >= Duration::from_millis(100) {
            last_sample = Instant::now();
            samples += 1;
            if samples.is_multiple_of(3) {
                foreign.sample();
            }
            let mem: u32 = m
                .status()
                .components
                .iter()
                .map(|c| c.stacks.allocated)
                .sum();
            memory.push((start.elapsed(), mem));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    foreign.sample();
    let foreign_rt = foreign.share(start.elapsed().as_secs_f64());
    stop.store(true, Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let _ = mantle_sys::pifutex::set_self_sched(mantle_sys::pifutex::Sched {
        policy: libc::SCHED_OTHER,
        value: 0,
    });
    m.down();
    let jobs = std::mem::take(&mut *jobs.lock().unwrap_or_else(|e| e.into_inner()));
    Run {
        jobs,
        memory,
        errors: errors.load(Relaxed),
        foreign_rt,
    }
}

/// TMEM_FIG_TRACE=1: every policy run on stderr (what Algorithm 1 saw:
/// the tardiness of each real-time thread, and per stack cache that a
/// thread blocked on, δ^j, a^j, r^j and the blocked threads).
fn trace() -> bool {
    std::env::var_os("TMEM_FIG_TRACE").is_some()
}

fn trace_run(m: &Manager, traced: &mut u64, start: Instant) {
    let st = m.status();
    let Some(run) = st.last_run.as_ref() else {
        return;
    };
    if run.run == *traced {
        return;
    }
    *traced = run.run;
    let tardy: Vec<String> = run
        .tardiness
        .iter()
        .map(|(tid, ns)| format!("{tid}:{:.1}", *ns as f64 / 1e6))
        .collect();
    let mut caches = Vec::new();
    for c in &st.components {
        for t in &c.tmem {
            if t.kind != mantle_comp::policy::Kind::Stack || t.view.per_thread.is_empty() {
                continue;
            }
            let b: Vec<String> = t
                .view
                .per_thread
                .iter()
                .map(|b| format!("{}:{}/{:.1}", b.tid, b.blocks, b.block_ns as f64 / 1e6))
                .collect();
            caches.push(format!(
                "{} d{} a{} r{} [{}]",
                c.name,
                t.view.desired,
                t.view.allocated,
                t.view.estimated_requests,
                b.join(" ")
            ));
        }
    }
    let total: u32 = st.components.iter().map(|c| c.stacks.allocated).sum();
    eprintln!(
        "trace: {:.2}s run {} stacks {total} tardy(ms) {{{}}} blocked: {}",
        start.elapsed().as_secs_f64(),
        run.run,
        tardy.join(" "),
        caches.join("; ")
    );
}

/// Per second in [from, to): (max tardiness ms, deadlines missed).
fn per_second(r: &Run, from: f64, to: f64) -> Vec<(f64, u32)> {
    let n = (to - from).round() as usize;
    let mut out = vec![(0.0f64, 0u32); n];
    for j in &r.jobs {
        let t = j.at.as_secs_f64();
        if t < from || t >= to {
            continue;
        }
        let b = ((t - from) as usize).min(n.saturating_sub(1));
        let ms = j.tardy.as_secs_f64() * 1e3;
        out[b].0 = out[b].0.max(ms);
        if !j.tardy.is_zero() {
            out[b].1 += 1;
        }
    }
    out
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn main() {
    let sets: u64 = env("TMEM_FIG_SETS", 3);
    let secs: f64 = env("TMEM_FIG_SECS", 3.0);
    let warm: f64 = env("TMEM_FIG_WARM", 1.0);
    let period_ms: u64 = env("TMEM_FIG_PERIOD_MS", 250);
    let extras: Vec<u32> = env("TMEM_FIG_EXTRA", "0,8,16,32".to_string())
        .split(',')
        .filter_map(|x| x.trim().parse().ok())
        .collect();
    let secs7: f64 = env("TMEM_FIG7_SECS", 15.0);
    let extra7: u32 = env("TMEM_FIG7_EXTRA", 32);
    let policies = ["tmem", "tmem-nopi", "greedy", "greedy-nopi", "fair"];
    let full = NCOMP * MAX_STACKS;
    println!(
        "Figure 8 system: {NCOMP} components, stacks 1..{MAX_STACKS} each, CBUF pool {} pages (one slab each); \
         policy period {period_ms} ms; components and real-time threads on CPU 0, policy loop on CPU 1",
        NCOMP * 64
    );
    let mut fig6 = Vec::new();
    for set in 0..sets {
        let tasks = taskset(set + 1);
        let u: f64 = tasks
            .iter()
            .map(|t| t.budget_us as f64 / t.period.as_micros() as f64)
            .sum();
        println!("\ntask set {set}: U = {u:.3}");
        for t in &tasks {
            println!(
                "  p {:>4} ms  e {:>6} us  FIFO {}  enters {}",
                t.period.as_millis(),
                t.budget_us,
                t.prio,
                t.top
            );
        }
        let mut todo: Vec<(String, u32)> = vec![("min".into(), 0), ("max".into(), full - NCOMP)];
        for &x in &extras {
            for p in policies {
                todo.push((p.into(), x));
            }
        }
        for (p, x) in todo {
            let r = run(&p, NCOMP + x, &tasks, warm + secs, None, period_ms);
            let ps = per_second(&r, warm, warm + secs);
            let maxt: Vec<f64> = ps.iter().map(|s| s.0).collect();
            let miss: Vec<f64> = ps.iter().map(|s| s.1 as f64).collect();
            let overall = ps.iter().map(|s| s.0).fold(0.0, f64::max);
            let mem = mean(
                &r.memory
                    .iter()
                    .filter(|(t, _)| t.as_secs_f64() >= warm)
                    .map(|(_, m)| *m as f64)
                    .collect::<Vec<_>>(),
            );
            println!(
                "  {p:<12} extra {x:>3}: max tardiness {:>8.2} ms/s (run max {:>8.2}), missed {:>6.2}/s, stacks in use {:>5.1}, jobs {}, errors {}, other RT load {:.0}%",
                mean(&maxt),
                overall,
                mean(&miss),
                mem,
                r.jobs.len(),
                r.errors,
                r.foreign_rt * 100.0
            );
            fig6.push(serde_json::json!({
                "set": set, "policy": p, "extra": x,
                "max_tardiness_ms": mean(&maxt), "run_max_tardiness_ms": overall,
                "missed_per_s": mean(&miss), "stacks_in_use": mem,
                "jobs": r.jobs.len(), "errors": r.errors, "foreign_rt": r.foreign_rt,
            }));
        }
    }

    println!(
        "\nFigure 7: open system, {secs7} s, best-effort threads from {:.1} s to {:.1} s, pool {} contexts (max: {full})",
        secs7 / 3.0,
        2.0 * secs7 / 3.0,
        NCOMP + extra7
    );
    let tasks = taskset(1);
    let mut fig7 = Vec::new();
    let pols7 = env(
        "TMEM_FIG7_POLICIES",
        "min,max,fair,greedy,tmem,tmem-nopi".to_string(),
    );
    for p in pols7.split(',') {
        let pool = if p == "max" { full } else { NCOMP + extra7 };
        let r = run(
            p,
            pool,
            &tasks,
            secs7,
            Some((secs7 / 3.0, 2.0 * secs7 / 3.0)),
            period_ms,
        );
        let ps = per_second(&r, 0.0, secs7);
        let mem: Vec<f64> = (0..ps.len())
            .map(|s| {
                mean(
                    &r.memory
                        .iter()
                        .filter(|(t, _)| {
                            t.as_secs_f64() >= s as f64 && t.as_secs_f64() < s as f64 + 1.0
                        })
                        .map(|(_, m)| *m as f64)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        println!(
            "  {p:<10} other RT load during the run {:.0}%",
            r.foreign_rt * 100.0
        );
        println!(
            "  {p:<10} per second: max tardiness ms {:?}\n             missed {:?}\n             stacks {:?}",
            ps.iter().map(|s| (s.0 * 10.0).round() / 10.0).collect::<Vec<_>>(),
            ps.iter().map(|s| s.1).collect::<Vec<_>>(),
            mem.iter().map(|m| m.round()).collect::<Vec<_>>()
        );
        fig7.push(serde_json::json!({
            "policy": p, "pool": pool,
            "max_tardiness_ms": ps.iter().map(|s| s.0).collect::<Vec<_>>(),
            "missed": ps.iter().map(|s| s.1).collect::<Vec<_>>(),
            "stacks_in_use": mem,
            "jobs": r.jobs.iter().map(|j| [j.at.as_secs_f64(), j.tardy.as_secs_f64() * 1e3]).collect::<Vec<_>>(),
            "memory": r.memory.iter().map(|(t, m)| [t.as_secs_f64(), *m as f64]).collect::<Vec<_>>(),
            "errors": r.errors, "foreign_rt": r.foreign_rt,
        }));
    }
    if let Ok(path) = std::env::var("TMEM_FIG_JSON") {
        let out = serde_json::json!({
            "sets": sets, "secs": secs, "warm": warm, "period_ms": period_ms,
            "min_contexts": NCOMP, "max_contexts": full,
            "fig6": fig6,
            "fig7": {"secs": secs7, "be": [secs7 / 3.0, 2.0 * secs7 / 3.0], "pool": NCOMP + extra7, "runs": fig7},
        });
        std::fs::write(&path, serde_json::to_vec(&out).unwrap_or_default())
            .expect("write the json");
    }
}
