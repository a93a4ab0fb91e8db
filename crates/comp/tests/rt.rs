//! The paper's bound under competing real-time load (TMEM §IV-B): a
//! high-priority caller that finds a component's cache empty waits at
//! most for the holder's remaining critical section, even while a
//! middle-priority SCHED_FIFO task wants the CPU. Everything runs on CPU
//! 0 (the paper's uniprocessor): the test thread (FIFO 30, so it can
//! start the others), the components it starts, a FIFO 5 holder, a FIFO
//! 10 hog spinning for [`HOG`], and a FIFO 20 caller.
//!
//! Every wait is compared with the hog's duration, measured in the same
//! run: without priority inheritance through the whole hold the high
//! caller waits for the hog to end (about `HOG`); with it, about the
//! holder's remaining `HOLD`. The margin between the two is half the gap.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use mantle_comp::{Manager, SystemFile};
use mantle_sys::pifutex::Sched;

const DEMO: &str = env!("CARGO_BIN_EXE_mantle-comp-demo");
/// How long the middle-priority task spins. With the holder and the
/// callers the CPU's real-time share stays under the kernel's 95%.
const HOG: Duration = Duration::from_millis(400);
/// The holder's critical section.
const HOLD: u64 = 80;

/// The tests of this file load CPU 0 with real-time tasks: one at a time.
static RT: Mutex<()> = Mutex::new(());

fn system(extra: &str, stacks: u32) -> SystemFile {
    SystemFile::parse(&format!(
        "[policy]\nname='none'\n[limits]\n{extra}\n[[component]]\nname='s'\n\
         exec=['{DEMO}','echo']\nstacks={stacks}\ncbuf_kib=4\n"
    ))
    .unwrap()
}

fn pin_cpu0() {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU 0 is inside the set's bits.
    unsafe { libc::CPU_SET(0, &mut set) };
    // SAFETY: set is a valid cpu_set_t of the size passed; 0 = this thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

fn fifo(p: i32) {
    mantle_sys::supervise::set_fifo(p).unwrap();
}

fn normal() {
    mantle_sys::pifutex::set_self_sched(Sched {
        policy: libc::SCHED_OTHER,
        value: 0,
    })
    .unwrap();
}

/// The middle-priority task: spins on CPU 0 (inherited) for HOG.
fn hog() -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(|| {
        fifo(10);
        let t = Instant::now();
        while t.elapsed() < HOG {
            std::hint::spin_loop();
        }
        t.elapsed()
    })
}

/// A FIFO 20 call of `f(args)`, timed.
fn high<F>(f: F) -> std::thread::JoinHandle<(Duration, i64)>
where
    F: FnOnce() -> i64 + Send + 'static,
{
    std::thread::spawn(move || {
        fifo(20);
        let t = Instant::now();
        let v = f();
        (t.elapsed(), v)
    })
}

/// Runs `body` pinned to CPU 0 at FIFO 30, and puts the thread back.
fn on_cpu0_rt(body: impl FnOnce(&Manager)) {
    mantle_testsupport::require_root("SCHED_FIFO");
    let _g = RT.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it.
    let mut old: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: old is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&old), &mut old) };
    pin_cpu0();
    body(&Manager::up(system("", 2)).unwrap());
    normal();
    // SAFETY: old is the set read above.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&old), &old) };
}

/// Waits (sleeping, so the FIFO 5 holders on CPU 0 run) until `held`
/// says the holders have taken what they hold: a fixed sleep was not
/// enough under load (the holder had not yet got its slab from the
/// manager when the hog started, and the high caller then never blocked:
/// 1 run in 30 at load 17).
fn until_held(m: &Manager, held: impl Fn(&Manager) -> bool) {
    let t0 = Instant::now();
    while !held(m) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the holders never took the cache: {:?}",
            m.status().components[0]
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn bound() -> Duration {
    // the holder's section plus half the gap to the hog
    Duration::from_millis(HOLD) + (HOG - Duration::from_millis(HOLD)) / 2
}

#[test]
#[ignore = "needs root (SCHED_FIFO)"]
fn a_free_context_runs_at_its_callers_priority_not_its_last_callers() {
    on_cpu0_rt(|m| {
        let s = m.server("s").unwrap();
        // both contexts last ran a SCHED_OTHER caller
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            let a = s2.invoke(1, &[5]);
            (a, s2.invoke(3, &[]))
        });
        assert_eq!(s.invoke(3, &[]).unwrap() / 1000, libc::SCHED_OTHER as i64);
        let (a, b) = t.join().unwrap();
        assert_eq!(
            (a.unwrap(), b.unwrap() / 1000),
            (0, libc::SCHED_OTHER as i64)
        );
        fifo(30);
        let h = hog();
        std::thread::sleep(Duration::from_millis(20));
        let s2 = s.clone();
        let (waited, v) = high(move || s2.invoke(3, &[]).unwrap()).join().unwrap();
        let hogged = h.join().unwrap();
        assert_eq!(v, libc::SCHED_FIFO as i64 * 1000 + 20);
        assert!(hogged >= HOG);
        assert!(
            waited < HOG / 4,
            "a free context kept the caller {waited:?} behind a {hogged:?} FIFO 10 task"
        );
    });
}

#[test]
#[ignore = "needs root (SCHED_FIFO)"]
fn a_high_priority_caller_waits_only_for_the_holders_stack_critical_section() {
    on_cpu0_rt(|m| {
        let s = m.server("s").unwrap();
        fifo(30);
        // the FIFO 5 callers hold both contexts for HOLD ms
        let lows: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    fifo(5);
                    s.invoke(1, &[HOLD]).unwrap()
                })
            })
            .collect();
        until_held(m, |m| m.status().components[0].stacks.busy == 2);
        let h = hog();
        std::thread::sleep(Duration::from_millis(10));
        let s2 = s.clone();
        let (waited, v) = high(move || s2.invoke(0, &[7]).unwrap()).join().unwrap();
        let hogged = h.join().unwrap();
        for l in lows {
            assert_eq!(l.join().unwrap(), 0);
        }
        assert_eq!(v, 7);
        assert!(hogged >= HOG);
        assert!(
            waited < bound(),
            "waited {waited:?} for a context held {HOLD} ms, behind a {hogged:?} FIFO 10 task"
        );
        let st = m.status().components[0].stacks.clone();
        assert!(st.blocks >= 1, "the high caller never blocked: {st:?}");
    });
}

#[test]
#[ignore = "needs root (SCHED_FIFO)"]
fn a_high_priority_caller_waits_only_for_the_holders_cbuf_critical_section() {
    on_cpu0_rt(|m| {
        let s = m.server("s").unwrap();
        fifo(30);
        // a FIFO 5 call takes all 64 buffers of the one 4 KiB slab the
        // component may have (cbuf_kib = 4) and holds them HOLD ms
        let low = {
            let s = s.clone();
            std::thread::spawn(move || {
                fifo(5);
                s.invoke(9, &[64, HOLD]).unwrap()
            })
        };
        until_held(m, |m| m.status().components[0].cbufs.in_use >= 64);
        let h = hog();
        std::thread::sleep(Duration::from_millis(10));
        // f6(0): one CBUF, freed at once
        let s2 = s.clone();
        let (waited, v) = high(move || s2.invoke(6, &[0]).unwrap()).join().unwrap();
        let hogged = h.join().unwrap();
        assert_eq!(low.join().unwrap(), 64_000);
        assert_eq!(v, 0);
        assert!(hogged >= HOG);
        assert!(
            waited < bound(),
            "waited {waited:?} for a CBUF held {HOLD} ms, behind a {hogged:?} FIFO 10 task"
        );
        let cb = m.status().components[0].cbufs.clone();
        assert!(cb.blocks >= 1, "the high caller never blocked: {cb:?}");
    });
}

#[test]
#[ignore = "needs root (SCHED_FIFO)"]
fn the_context_follows_the_callers_priority_at_every_invocation() {
    mantle_testsupport::require_root("SCHED_FIFO");
    let _g = RT.lock().unwrap_or_else(|e| e.into_inner());
    let m = Manager::up(system("", 1)).unwrap();
    let s = m.server("s").unwrap();
    // one thread, changing its scheduling between calls and telling
    // nobody (the C API has no priority_changed)
    let t = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for p in [0, 7, 42, 0, 3] {
            if p == 0 {
                normal();
            } else {
                fifo(p);
            }
            seen.push(s.invoke(3, &[]).unwrap());
        }
        seen
    });
    let (o, f) = (
        libc::SCHED_OTHER as i64 * 1000,
        libc::SCHED_FIFO as i64 * 1000,
    );
    assert_eq!(t.join().unwrap(), [o, f + 7, f + 42, o, f + 3]);
}

/// One run of the periodic test: (late jobs, per best-effort thread
/// (policy, jobs)).
type PeriodicRun = (Vec<(u64, Duration)>, Vec<(i32, u64)>);

fn periodic_beside_best_effort(a: &mantle_comp::Server) -> PeriodicRun {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let be: Vec<_> = (0..4u64)
        .map(|k| {
            let (a, stop) = (a.clone(), stop.clone());
            std::thread::spawn(move || {
                normal();
                // SAFETY: sched_getscheduler(0) reads this thread's policy.
                let policy = unsafe { libc::sched_getscheduler(0) };
                let mut jobs = 0u64;
                let mut seed = k * 31 + 5;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    assert!(a.invoke(0, &[5000, 2500, seed >> 1, 0]).unwrap() > 0);
                    jobs += 1;
                }
                (policy, jobs)
            })
        })
        .collect();
    let rt = {
        let a = a.clone();
        std::thread::spawn(move || {
            fifo(70);
            let period = Duration::from_millis(20);
            let mut release = Instant::now() + Duration::from_millis(200);
            let mut late = Vec::new();
            for j in 0..100u64 {
                let now = Instant::now();
                if release > now {
                    std::thread::sleep(release - now);
                }
                assert!(a.invoke(0, &[4000, 2000, j * 2 + 1, 0]).unwrap() > 0);
                let done = Instant::now();
                if done > release + period {
                    late.push((j, done - (release + period)));
                }
                release += period;
            }
            late
        })
    };
    let late = rt.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let be: Vec<(i32, u64)> = be.into_iter().map(|t| t.join().unwrap()).collect();
    (late, be)
}

/// Figure 7's open system in small, under `max` (no memory contention):
/// a periodic SCHED_FIFO thread and best-effort callers through the same
/// two components, all on CPU 0. The best-effort threads take every CPU
/// cycle the real-time one leaves; the real-time thread must still meet
/// every deadline (period 20 ms, 4 ms of work: 16 ms of slack).
///
/// Figure 7 missed 14-33 deadlines a second here under every policy
/// because its "best-effort" threads had inherited SCHED_FIFO 1 from the
/// thread that spawned them: SCHED_OTHER then starved, and the kernel's
/// fair server (Linux >= 6.12) ran it for ~50 ms once a second above
/// every real-time thread. This test spawns its best-effort threads from
/// a FIFO thread too and checks that each really runs SCHED_OTHER, so a
/// harness (or a runtime) that lets real-time scheduling leak into
/// best-effort work fails here.
#[test]
#[ignore = "needs root (SCHED_FIFO)"]
fn a_periodic_real_time_thread_beside_best_effort_callers_misses_no_deadline() {
    mantle_testsupport::require_root("SCHED_FIFO");
    let _g = RT.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it.
    let mut old: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: old is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&old), &mut old) };
    pin_cpu0();
    let m = Manager::up(
        SystemFile::parse(&format!(
            "[policy]\nname='max'\n[limits]\nstacks=16\n\
             [[component]]\nname='a'\nexec=['{DEMO}','fig8','b:100']\ninvokes=['b']\n\
             stacks=8\nmax_stacks=8\ncbuf_kib=256\n\
             [[component]]\nname='b'\nexec=['{DEMO}','fig8']\n\
             stacks=8\nmax_stacks=8\ncbuf_kib=256\n"
        ))
        .unwrap(),
    )
    .unwrap();
    // the test thread spawns at FIFO 30, as the bench's loop did at FIFO 1
    fifo(30);
    let a = m.server("a").unwrap();
    // What this guards against stalls the real-time thread in every run,
    // for tens of ms to seconds (the fair server's 50 ms a second; a
    // service thread behind the load): every job late, up to 1.79 s, when
    // the best-effort threads kept a FIFO priority. The shared machine
    // adds its own: one job 8.5 ms late at load 21, and once 36 jobs late
    // by 39..357 ms in a row (another engineer's real-time work on CPU 0).
    // So: a run passes with at most two jobs late by under 20 ms, and the
    // test with one passing run of three.
    let (mut runs, mut passed) = (Vec::new(), false);
    for _ in 0..3 {
        let (late, be) = periodic_beside_best_effort(&a);
        assert!(
            be.iter().all(|&(p, _)| p == libc::SCHED_OTHER),
            "best-effort threads not SCHED_OTHER: {be:?}"
        );
        // the competition was real: every best-effort thread ran jobs of
        // 5 ms through both components while the real-time thread ran
        // (how many depends on the machine's other load: at load 24 the
        // four together once did fewer than 20 in 2.2 s)
        assert!(
            be.iter().all(|&(_, n)| n >= 1),
            "a best-effort thread never ran a job: {be:?}"
        );
        let worst = late.iter().map(|l| l.1).max().unwrap_or_default();
        let ok = late.len() <= 2 && worst < Duration::from_millis(20);
        runs.push(late);
        if ok {
            passed = true;
            break;
        }
    }
    normal();
    // SAFETY: old is the set read above.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&old), &old) };
    drop(m);
    assert!(
        passed,
        "deadlines missed in 3 runs of 3 (job, tardiness): {runs:?}"
    );
}

/// The CBUF manager's service thread runs a request at the requester's
/// priority: a FIFO 20 call whose CBUF needs a new slab (a request to the
/// manager's thread, here on CPU 0 with everything else) while a FIFO 10
/// task spins. Before, the service thread ran SCHED_OTHER and the call
/// waited for the whole spin (about `HOG`); now the requester lends it its
/// priority through the table's `svc_pi` PI word.
#[test]
#[ignore = "needs root (SCHED_FIFO)"]
fn a_real_time_request_to_the_cbuf_manager_is_served_at_the_requesters_priority() {
    on_cpu0_rt(|m| {
        let s = m.server("s").unwrap();
        // the component is up and has no slab yet: its first CBUF asks
        // the manager for one
        assert_eq!(s.invoke(0, &[1, 0, 0, 0, 0, 2]).unwrap(), 3);
        assert_eq!(m.status().components[0].cbufs.slabs, 0);
        fifo(30);
        let h = hog();
        std::thread::sleep(Duration::from_millis(10));
        let s2 = s.clone();
        let (waited, v) = high(move || s2.invoke(6, &[0]).unwrap()).join().unwrap();
        let hogged = h.join().unwrap();
        assert_eq!(v, 0);
        assert!(hogged >= HOG);
        assert_eq!(m.status().components[0].cbufs.slabs, 1);
        // the request itself is a memfd, two seals and an fd pass: well
        // under half the gap to the hog
        assert!(
            waited < (HOG - Duration::from_millis(10)) / 2,
            "a new slab took {waited:?} behind a {hogged:?} FIFO 10 task"
        );
    });
}
