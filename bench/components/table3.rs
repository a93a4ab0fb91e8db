//! Table III of the TMEM paper (seeds/003 §VI-A) on Linux, with one-word
//! RPC baselines measured in the same run.
//!
//! Run (as root, for the PI rows' SCHED_FIFO caller), holding the bench
//! lock, pinned:
//!   flock /tmp/mantle-bench.lock taskset -c 0 cargo bench -p mantle-comp --bench table3
//! Environment: TABLE3_REPS (default 20000), TABLE3_CROSS=1 adds rows
//! with the server pinned to CPU 1 (the callers stay where taskset put
//! them), TABLE3_JSON=path writes the rows as JSON, TABLE3_SPIN sets the
//! caller's spin for the main rows (default 0) and TABLE3_SPIN_N the spin
//! of the extra "caller spin" rows (default 20000 iterations).
//!
//! Every row: mean, standard deviation, p99 and max of one operation, in
//! ns and in TSC cycles (TSC rate calibrated against CLOCK_MONOTONIC).

use std::os::fd::AsFd;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mantle_comp::cbuf::{CbufManager, Cbufs};
use mantle_comp::{Manager, SystemFile};
use mantle_sys::os::tsc;
use mantle_sys::shm::{futex_wait, futex_wake, SharedMem};

const DEMO: &str = env!("CARGO_BIN_EXE_mantle-comp-demo");

struct Row {
    name: String,
    cycles: Vec<u64>,
}

/// (mean, sd, median, p99, max) of cycles.
fn stats(v: &mut [u64]) -> (f64, f64, u64, u64, u64) {
    v.sort_unstable();
    let n = v.len() as f64;
    let mean = v.iter().sum::<u64>() as f64 / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    let q = |f: f64| v[((v.len() as f64 * f) as usize).min(v.len() - 1)];
    (mean, var.sqrt(), q(0.5), q(0.99), *v.last().unwrap_or(&0))
}

/// Several operations measured side by side: `rounds` rounds, each
/// running every operation `reps / rounds` times in turn, so that a
/// change of load on the shared machine hits all of them alike (the
/// ratios come from these rows).
fn interleaved(reps: usize, ops: &mut [(&str, &mut dyn FnMut())]) -> Vec<Row> {
    let rounds = 20;
    let per = (reps / rounds).max(1);
    let mut rows: Vec<Row> = ops
        .iter()
        .map(|(n, _)| Row {
            name: format!("{n} [interleaved]"),
            cycles: Vec::with_capacity(per * rounds),
        })
        .collect();
    for (_, f) in ops.iter_mut() {
        for _ in 0..per {
            f();
        }
    }
    for _ in 0..rounds {
        for (k, (_, f)) in ops.iter_mut().enumerate() {
            for _ in 0..per {
                let t = tsc();
                f();
                rows[k].cycles.push(tsc() - t);
            }
        }
    }
    rows
}

fn tsc_per_ns() -> f64 {
    let (t0, c0) = (Instant::now(), tsc());
    std::thread::sleep(Duration::from_millis(100));
    (tsc() - c0) as f64 / t0.elapsed().as_nanos() as f64
}

fn measure(name: &str, reps: usize, mut f: impl FnMut()) -> Row {
    for _ in 0..reps / 10 {
        f();
    }
    let cycles = (0..reps)
        .map(|_| {
            let t = tsc();
            f();
            tsc() - t
        })
        .collect();
    Row {
        name: name.into(),
        cycles,
    }
}

/// Baselines: a child process answering one-word requests over a unix
/// socket, a pipe pair, and a futex word in shared memory. Forked before
/// any thread exists.
struct Baselines {
    pids: Vec<u32>,
    sock: std::os::fd::OwnedFd,
    pipe_w: std::os::fd::OwnedFd,
    pipe_r: std::os::fd::OwnedFd,
    shm: SharedMem,
}

fn fork_baselines() -> Baselines {
    use mantle_sys::os::{pipe, read_exact_raw, write_all_raw};
    let (a, b) = mantle_sys::supervise::socketpair().unwrap();
    let (req_r, req_w) = pipe().unwrap();
    let (rep_r, rep_w) = pipe().unwrap();
    let shm = SharedMem::create(c"table3-futex", 4096).unwrap();
    // one child per mechanism, each single-threaded
    // the children inherit every fd (the bench lock's too, from flock):
    // they are killed at the end of main, never left behind
    let mut pids = Vec::new();
    let mut child = |f: Box<dyn FnOnce() -> i32>| {
        pids.push(
            mantle_sys::supervise::fork_single_threaded(f)
                .unwrap()
                .pid(),
        );
    };
    {
        let b = b.try_clone().unwrap();
        child(Box::new(move || {
            let mut m = [0u8; 8];
            while read_exact_raw(b.as_fd(), &mut m).is_ok() {
                let v = u64::from_ne_bytes(m) + 1;
                if write_all_raw(b.as_fd(), &v.to_ne_bytes()).is_err() {
                    break;
                }
            }
            0
        }));
    }
    {
        let (req_r, rep_w) = (req_r.try_clone().unwrap(), rep_w.try_clone().unwrap());
        child(Box::new(move || {
            let mut m = [0u8; 8];
            while read_exact_raw(req_r.as_fd(), &mut m).is_ok() {
                let v = u64::from_ne_bytes(m) + 1;
                if write_all_raw(rep_w.as_fd(), &v.to_ne_bytes()).is_err() {
                    break;
                }
            }
            0
        }));
    }
    {
        // the futex child: 1 = request, 2 = reply, 3 = quit
        let mine = SharedMem::map(shm.fd().try_clone().unwrap(), 4096).unwrap();
        child(Box::new(move || loop {
            let w = mine.u32(0).unwrap();
            match w.load(Acquire) {
                1 => {
                    w.store(2, Release);
                    futex_wake(w);
                }
                3 => return 0,
                v => {
                    futex_wait(w, v, Duration::from_secs(1));
                }
            }
        }));
    }
    drop((b, req_r, rep_w));
    Baselines {
        pids,
        sock: a,
        pipe_w: req_w,
        pipe_r: rep_r,
        shm,
    }
}

/// The calling thread to SCHED_FIFO 10 (true) or left as it is (false:
/// not root).
fn fifo_on() -> bool {
    let ok = mantle_sys::supervise::set_fifo(10).is_ok();
    mantle_comp::runtime::priority_changed();
    ok
}

fn fifo_off() {
    let _ = mantle_sys::pifutex::set_self_sched(mantle_sys::pifutex::Sched {
        policy: libc::SCHED_OTHER,
        value: 0,
    });
    mantle_comp::runtime::priority_changed();
}

fn system(server_cpu: Option<u32>) -> SystemFile {
    let exec = match server_cpu {
        Some(c) => format!("'taskset', '-c', '{c}', '{DEMO}', 'echo'"),
        None => format!("'{DEMO}', 'echo'"),
    };
    SystemFile::parse(&format!(
        "[[component]]\nname='s'\nexec=[{exec}]\nstacks=2\n\
         [[component]]\nname='pi'\nexec=[{exec}]\nstacks=1\n"
    ))
    .unwrap()
}

fn main() {
    let reps: usize = std::env::var("TABLE3_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20000);
    let spin: u32 = std::env::var("TABLE3_SPIN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let base = fork_baselines();
    eprintln!("table3: baselines forked");
    let rate = tsc_per_ns();
    let mut rows = Vec::new();

    // --- baselines ------------------------------------------------------
    {
        use mantle_sys::os::{read_exact_raw, write_all_raw};
        let mut m = [0u8; 8];
        rows.push(measure("RPC unix socket (1 word)", reps, || {
            write_all_raw(base.sock.as_fd(), &7u64.to_ne_bytes()).unwrap();
            read_exact_raw(base.sock.as_fd(), &mut m).unwrap();
        }));
        rows.push(measure("RPC pipe pair (1 word)", reps, || {
            write_all_raw(base.pipe_w.as_fd(), &7u64.to_ne_bytes()).unwrap();
            read_exact_raw(base.pipe_r.as_fd(), &mut m).unwrap();
        }));
        let w = base.shm.u32(0).unwrap();
        rows.push(measure("RPC futex in shared memory (1 word)", reps, || {
            w.store(1, Release);
            futex_wake(w);
            while w.load(Acquire) != 2 {
                futex_wait(w, 1, Duration::from_millis(100));
            }
            w.store(0, Relaxed);
        }));
    }

    // --- thread block/wakeup (two threads, one futex word each way) -----
    {
        let w = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (w2, stop2) = (w.clone(), stop.clone());
        let t = std::thread::spawn(move || {
            while !stop2.load(Relaxed) {
                if w2.load(Acquire) == 1 {
                    w2.store(2, Release);
                    futex_wake(&w2);
                } else {
                    futex_wait(&w2, 0, Duration::from_millis(50));
                }
            }
        });
        let mut r = measure("thread block/wakeup (round trip)", reps, || {
            w.store(1, Release);
            futex_wake(&w);
            while w.load(Acquire) != 2 {
                futex_wait(&w, 1, Duration::from_millis(100));
            }
            w.store(0, Release);
        });
        // one block and one wakeup each way: report one of them
        r.cycles.iter_mut().for_each(|c| *c /= 2);
        r.name = "thread block/wakeup (half round trip)".into();
        rows.push(r);
        stop.store(true, Relaxed);
        w.store(1, Release);
        futex_wake(&w);
        t.join().unwrap();
    }

    // --- invocations -----------------------------------------------------
    mantle_comp::runtime::set_spin(spin);
    let mut configs = vec![(None, "")];
    if std::env::var("TABLE3_CROSS").is_ok_and(|v| v == "1") {
        configs.push((Some(1), " [server on CPU 1]"));
    }
    for (cpu, tag) in configs {
        eprintln!("table3: invocations{tag}");
        let m = Manager::up(system(cpu)).unwrap();
        let s = m.server("s").unwrap();
        {
            let pre = s.reserve().unwrap();
            rows.push(measure(
                &format!("pre-TMEM invocation (preallocated context){tag}"),
                reps,
                || {
                    pre.invoke(0, &[1, 2, 3, 4, 5, 6]).unwrap();
                },
            ));
        }
        rows.push(measure(
            &format!("invocation w/ cached stack{tag}"),
            reps,
            || {
                s.invoke(0, &[1, 2, 3, 4, 5, 6]).unwrap();
            },
        ));
        // PI: a low-priority caller holds the only context; we (SCHED_FIFO
        // 10 when root) invoke; the holder's function returns as soon as
        // it sees us blocked.
        let pis = m.server("pi").unwrap();
        let region = &m.comps[1].region;
        let go = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let low = {
            let (pis, go, stop) = (pis.clone(), go.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Relaxed) {
                    if go.swap(0, Acquire) == 1 {
                        pis.invoke(7, &[]).unwrap();
                    } else {
                        // sleep, not spin: a spinning SCHED_OTHER thread on
                        // the context's CPU delays it by a CFS slice
                        futex_wait(&go, 0, Duration::from_millis(20));
                    }
                }
            })
        };
        let pi_reps = (reps / 10).max(200);
        let mut cyc = Vec::with_capacity(pi_reps);
        let mut fifo = false;
        for _ in 0..pi_reps {
            go.store(1, Release);
            futex_wake(&go);
            while region.counters().busy == 0 {
                std::thread::yield_now();
            }
            // FIFO only around the timed call: a FIFO thread waiting by
            // sched_yield would starve the SCHED_OTHER holder on one CPU
            fifo = fifo_on();
            let t = tsc();
            pis.invoke(0, &[1]).unwrap();
            cyc.push(tsc() - t);
            fifo_off();
            while region.counters().busy != 0 {
                std::thread::yield_now();
            }
        }
        stop.store(true, Relaxed);
        low.join().unwrap();
        rows.push(Row {
            name: format!(
                "invocation w/ PI (cache empty, holder boosted{}){tag}",
                if fifo {
                    ", caller FIFO 10"
                } else {
                    ", NOT root: no FIFO"
                }
            ),
            cycles: cyc,
        });
        drop(m);
    }

    // --- the ratios' rows: baselines and invocations side by side ---------
    {
        use mantle_sys::os::{read_exact_raw, write_all_raw};
        eprintln!("table3: interleaved");
        let m = Manager::up(system(None)).unwrap();
        let s = m.server("s").unwrap();
        let pre = s.reserve().unwrap();
        let w = base.shm.u32(0).unwrap();
        let mut buf = [0u8; 8];
        let mut unix = || {
            write_all_raw(base.sock.as_fd(), &7u64.to_ne_bytes()).unwrap();
            read_exact_raw(base.sock.as_fd(), &mut buf).unwrap();
        };
        let mut buf2 = [0u8; 8];
        let mut pipe = || {
            write_all_raw(base.pipe_w.as_fd(), &7u64.to_ne_bytes()).unwrap();
            read_exact_raw(base.pipe_r.as_fd(), &mut buf2).unwrap();
        };
        let mut futex = || {
            w.store(1, Release);
            futex_wake(w);
            while w.load(Acquire) != 2 {
                futex_wait(w, 1, Duration::from_millis(100));
            }
            w.store(0, Relaxed);
        };
        let mut prealloc = || {
            pre.invoke(0, &[1, 2, 3, 4, 5, 6]).unwrap();
        };
        let mut cached = || {
            s.invoke(0, &[1, 2, 3, 4, 5, 6]).unwrap();
        };
        rows.extend(interleaved(
            reps,
            &mut [
                ("RPC unix socket (1 word)", &mut unix),
                ("RPC pipe pair (1 word)", &mut pipe),
                ("RPC futex in shared memory (1 word)", &mut futex),
                ("pre-TMEM invocation (preallocated context)", &mut prealloc),
                ("invocation w/ cached stack", &mut cached),
            ],
        ));
        drop(pre);
        drop(m);
    }

    // --- handoff choice: the caller spins before it sleeps ---------------
    // (docs/comp.md "Handoff"): the same invocation with the caller
    // spinning up to TABLE3_SPIN_N iterations on its slot, same CPU and,
    // with TABLE3_CROSS, server on CPU 1.
    let spin_n: u32 = std::env::var("TABLE3_SPIN_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20000);
    let mut spin_configs = vec![(None, format!(" [caller spin {spin_n}]"))];
    if std::env::var("TABLE3_CROSS").is_ok_and(|v| v == "1") {
        spin_configs.push((Some(1), format!(" [server on CPU 1, caller spin {spin_n}]")));
    }
    for (cpu, tag) in spin_configs {
        eprintln!("table3: invocations{tag}");
        let m = Manager::up(system(cpu)).unwrap();
        let s = m.server("s").unwrap();
        mantle_comp::runtime::set_spin(spin_n);
        rows.push(measure(
            &format!("invocation w/ cached stack{tag}"),
            reps,
            || {
                s.invoke(0, &[1, 2, 3, 4, 5, 6]).unwrap();
            },
        ));
        mantle_comp::runtime::set_spin(spin);
        drop(m);
    }

    // --- CBUFs (in this process, with an in-process CBUF manager) --------
    {
        let (mgr_end, client_end) = mantle_sys::supervise::socketpair().unwrap();
        // component 0: ample; component 1: one 64-byte slab (64 buffers)
        let mgr = CbufManager::new(&[1 << 24, 4096], vec![vec![], vec![]], 1 << 26).unwrap();
        let (mgr2_end, client2_end) = mantle_sys::supervise::socketpair().unwrap();
        let cb = Cbufs::new(client_end, mgr.table_fd(0).try_clone().unwrap()).unwrap();
        let cb2 = Arc::new(Cbufs::new(client2_end, mgr.table_fd(1).try_clone().unwrap()).unwrap());
        let mgr = Arc::new(std::sync::Mutex::new(mgr));
        for (c, end) in [(0usize, mgr_end), (1, mgr2_end)] {
            let mgr = mgr.clone();
            std::thread::spawn(move || loop {
                // wait for a request before taking the manager's lock
                let mut p = [libc::pollfd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(&end),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                if mantle_sys::supervise::poll(&mut p, -1).is_err()
                    || mgr.lock().unwrap().serve_one(c, &end).is_err()
                {
                    return;
                }
            });
        }
        // cached alloc: warm the cache with one slab's worth first
        let warm: Vec<_> = (0..64).map(|_| cb.alloc(64).unwrap().0).collect();
        warm.into_iter().for_each(|p| cb.free(p).unwrap());
        let mut alloc = Vec::with_capacity(reps);
        let mut free = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = tsc();
            let (p, _) = cb.alloc(64).unwrap();
            let t2 = tsc();
            cb.free(p).unwrap();
            let t3 = tsc();
            alloc.push(t2 - t);
            free.push(t3 - t2);
        }
        eprintln!("table3: cbuf rows");
        rows.push(Row {
            name: "cached cbuf_alloc".into(),
            cycles: alloc,
        });
        rows.push(Row {
            name: "cached cbuf_free".into(),
            cycles: free,
        });
        let (p, id) = cb.alloc(64).unwrap();
        rows.push(measure("cbuf2buf (cached)", reps, || {
            std::hint::black_box(cb.cbuf2buf(id, 64).unwrap());
        }));
        cb.free(p).unwrap();

        // cbuf_alloc with PI: a holder thread owns all 64 buffers of
        // component 1 and frees one as soon as we block.
        let stop = Arc::new(AtomicBool::new(false));
        let held: Vec<usize> = (0..64).map(|_| cb2.alloc(64).unwrap().0 as usize).collect();
        let ready = Arc::new(AtomicU32::new(0));
        let holder = {
            let (cb2, stop, ready) = (cb2.clone(), stop.clone(), ready.clone());
            std::thread::spawn(move || {
                // re-own the buffers here (so this thread is the holder)
                for p in held {
                    cb2.free(p as *mut u8).unwrap();
                }
                let mut mine: Vec<usize> =
                    (0..64).map(|_| cb2.alloc(64).unwrap().0 as usize).collect();
                ready.store(1, Release);
                while !stop.load(Relaxed) {
                    if cb2.waiters() > 0 {
                        if let Some(p) = mine.pop() {
                            cb2.free(p as *mut u8).unwrap();
                        }
                    } else if mine.len() < 64 && ready.load(Acquire) == 2 {
                        // our side took one back: refill to keep the cache empty
                        if let Ok((p, _)) = cb2.alloc(64) {
                            mine.push(p as usize);
                        }
                        ready.store(1, Release);
                    } else {
                        std::hint::spin_loop();
                    }
                }
                mine.into_iter()
                    .for_each(|p| cb2.free(p as *mut u8).unwrap());
            })
        };
        while ready.load(Acquire) == 0 {
            std::hint::spin_loop();
        }
        let mut fifo = false;
        let mut cyc = Vec::new();
        for _ in 0..(reps / 10).max(200) {
            fifo = fifo_on();
            let t = tsc();
            let (p, _) = cb2.alloc(64).unwrap();
            cyc.push(tsc() - t);
            fifo_off();
            cb2.free(p).unwrap();
            ready.store(2, Release);
            while ready.load(Acquire) != 1 {
                std::thread::yield_now();
            }
        }
        stop.store(true, Relaxed);
        holder.join().unwrap();
        rows.push(Row {
            name: format!(
                "cbuf_alloc w/ PI (cache empty{})",
                if fifo {
                    ", caller FIFO 10"
                } else {
                    ", NOT root"
                }
            ),
            cycles: cyc,
        });
    }

    // --- report -----------------------------------------------------------
    let aff = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Cpus_allowed_list"))
                .map(|l| l.to_string())
        })
        .unwrap_or_default();
    println!("# Table III on Linux: {reps} reps (PI rows: fewer), TSC {rate:.3} cycles/ns, caller spin {spin}, {aff}");
    println!("| operation | n | mean ns | sd ns | median ns | p99 ns | max ns | mean cyc | sd cyc | median cyc | p99 cyc | max cyc |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut json = Vec::new();
    let mut means = std::collections::BTreeMap::new();
    let mut medians = std::collections::BTreeMap::new();
    for r in &mut rows {
        let n = r.cycles.len();
        let (m, sd, med, p99, max) = stats(&mut r.cycles);
        let ns = |c: f64| c / rate;
        println!(
            "| {} | {n} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {m:.0} | {sd:.0} | {med} | {p99} | {max} |",
            r.name,
            ns(m),
            ns(sd),
            ns(med as f64),
            ns(p99 as f64),
            ns(max as f64)
        );
        means.insert(r.name.clone(), ns(m));
        medians.insert(r.name.clone(), ns(med as f64));
        json.push(
            serde_json::json!({"op": r.name, "n": n, "mean_ns": ns(m), "sd_ns": ns(sd),
            "median_ns": ns(med as f64), "p99_ns": ns(p99 as f64), "max_ns": ns(max as f64),
            "mean_cycles": m, "sd_cycles": sd, "median_cycles": med,
            "p99_cycles": p99, "max_cycles": max}),
        );
    }
    let g = |k: &str| means.get(k).copied().unwrap_or(f64::NAN);
    let gm = |k: &str| medians.get(k).copied().unwrap_or(f64::NAN);
    // the ratios: from the interleaved rows (side by side in time)
    let iv = |k: &str| format!("{k} [interleaved]");
    let cached = iv("invocation w/ cached stack");
    println!();
    for (what, other, bar) in [
        (
            "cached-stack / preallocated invocation",
            "pre-TMEM invocation (preallocated context)",
            " (bar <= 1.05)",
        ),
        (
            "invocation / unix-socket RPC",
            "RPC unix socket (1 word)",
            " (bar < 1)",
        ),
        ("invocation / pipe RPC", "RPC pipe pair (1 word)", ""),
        (
            "invocation / futex RPC",
            "RPC futex in shared memory (1 word)",
            "",
        ),
    ] {
        println!(
            "ratio {what}: median {:.3}, mean {:.3}{bar} [interleaved rows]",
            gm(&cached) / gm(&iv(other)),
            g(&cached) / g(&iv(other))
        );
    }
    for k in ["cached cbuf_alloc", "cached cbuf_free", "cbuf2buf (cached)"] {
        println!("{k}: {:.1} ns (bar <= 100)", g(k));
    }
    for &pid in &base.pids {
        let _ = mantle_sys::supervise::kill(pid as i32, libc::SIGKILL);
        let _ = mantle_sys::supervise::wait_child(pid as i32, true);
    }
    if let Ok(p) = std::env::var("TABLE3_JSON") {
        std::fs::write(p, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    }
}
