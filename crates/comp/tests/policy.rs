//! The TMEM policies on a running system: tardiness reported by real-time
//! threads moves memory to the component they block in, and the policy
//! can be switched while the system runs.

use std::time::{Duration, Instant};

use mantle_comp::manager::Event;
use mantle_comp::policy::Kind;
use mantle_comp::system::PolicyName;
use mantle_comp::{Manager, SystemFile};

const DEMO: &str = env!("CARGO_BIN_EXE_mantle-comp-demo");
const PERIOD_MS: u64 = 100;

fn system(policy: &str) -> SystemFile {
    SystemFile::parse(&format!(
        "[limits]\nstacks=8\n[policy]\nname='{policy}'\nperiod_ms={PERIOD_MS}\n\
         [[component]]\nname='s'\nexec=['{DEMO}','echo']\nstacks=1\nmax_stacks=4\n\
         [[component]]\nname='t'\nexec=['{DEMO}','echo']\nstacks=2\nmax_stacks=4\n"
    ))
    .unwrap()
}

fn desired(m: &Manager, c: &str) -> u32 {
    let st = m.status();
    st.components
        .iter()
        .find(|x| x.name == c)
        .unwrap()
        .stacks
        .desired
}

/// Ticks for `limit`, until `done`; returns the policy runs it took.
fn run_until(m: &mut Manager, limit: Duration, done: impl Fn(&Manager) -> bool) -> Option<u64> {
    let runs0 = m.status().policy.runs;
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        m.tick();
        if done(m) {
            return Some(m.status().policy.runs - runs0);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

#[test]
#[ignore = "needs root (SCHED_FIFO threads: only real-time threads are in T)"]
fn tardiness_in_one_component_moves_memory_there_within_a_few_periods() {
    mantle_testsupport::require_root("SCHED_FIFO");
    for (policy, moves) in [("tmem", true), ("min", false)] {
        let mut m = Manager::up(system(policy)).unwrap();
        assert_eq!(desired(&m, "s"), 1);
        let s = m.server("s").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // three FIFO threads (rate-monotonic 10, 11, 12), each job a
        // 30 ms call holding one of s's contexts, then a report of 20 ms
        // tardiness and a 20 ms rest: with one context they queue
        let ts: Vec<_> = (0..3)
            .map(|k| {
                let (s, stop) = (s.clone(), stop.clone());
                std::thread::spawn(move || {
                    mantle_sys::supervise::set_fifo(10 + k).unwrap();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        s.invoke(1, &[30]).unwrap();
                        s.invoke(11, &[20_000]).unwrap();
                        std::thread::sleep(Duration::from_millis(20));
                    }
                })
            })
            .collect();
        // the bar is in policy periods; the time limit only ends a run
        // that never gets there (ticks are late on a loaded machine)
        let limit = Duration::from_secs(if moves { 10 } else { 3 });
        let runs = run_until(&mut m, limit, |m| desired(m, "s") >= 3);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in ts {
            t.join().unwrap();
        }
        let st = m.status();
        if moves {
            let runs = runs.unwrap_or_else(|| panic!("tmem never gave s 3 contexts: {st:?}"));
            assert!(runs <= 6, "took {runs} periods");
            let last = st.last_run.clone().unwrap();
            assert_eq!(last.policy, "tmem");
            // t (no tardiness there) kept what it had
            assert_eq!(desired(&m, "t"), 2);
            assert_eq!(st.policy.tardiness_rejected, 0);
            assert!(m.history().any(|r| !r.tardiness.is_empty()));
        } else {
            assert!(runs.is_none(), "min moved memory");
            assert_eq!(desired(&m, "s"), 1);
        }
    }
}

#[test]
#[ignore = "needs root (SCHED_OTHER reports are refused: shown against a FIFO one)"]
fn a_tardiness_report_from_a_thread_that_is_not_real_time_is_refused() {
    mantle_testsupport::require_root("SCHED_FIFO");
    let mut m = Manager::up(system("tmem")).unwrap();
    let s = m.server("s").unwrap();
    s.invoke(11, &[5_000]).unwrap();
    run_until(&mut m, Duration::from_millis(300), |m| {
        m.status().policy.runs >= 2
    });
    assert_eq!(m.status().policy.tardiness_rejected, 1);
    // a FIFO thread's report counts (it lives until the run read it:
    // the check is made then)
    let s2 = s.clone();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        mantle_sys::supervise::set_fifo(10).unwrap();
        s2.invoke(11, &[5_000]).unwrap();
        let _ = rx.recv();
    });
    let runs = m.status().policy.runs;
    run_until(&mut m, Duration::from_millis(300), |m| {
        m.status().policy.runs >= runs + 2
    });
    drop(tx);
    t.join().unwrap();
    assert_eq!(m.status().policy.tardiness_rejected, 1);
    assert!(m
        .history()
        .any(|r| r.tardiness.values().any(|&ns| ns == 5_000_000)));
}

#[test]
fn the_policy_can_be_switched_on_a_running_system() {
    let mut m = Manager::up(system("fixed")).unwrap();
    let s = m.server("s").unwrap();
    for (name, s_want, t_want, nopi) in [
        (PolicyName::Max, 4, 4, 0),
        (PolicyName::Min, 1, 1, 0),
        (PolicyName::Fair, 4, 4, 0),
        (PolicyName::TmemNopi, 4, 4, 1),
        (PolicyName::GreedyNopi, 4, 4, 1),
        (PolicyName::Tmem, 4, 4, 0),
    ] {
        m.set_policy(name);
        let ok = run_until(&mut m, Duration::from_secs(2), |m| {
            desired(m, "s") == s_want && desired(m, "t") == t_want
        });
        assert!(ok.is_some_and(|r| r <= 2), "{name:?}: {:?}", m.status());
        assert_eq!(m.status().policy.name, name.as_str());
        assert_eq!(m.comps[0].region.nopi(), nopi == 1);
        assert_eq!(m.status().policy.pi, nopi == 0);
        // the system serves under every policy
        assert_eq!(s.invoke(0, &[1, 0, 0, 0, 0, 1]).unwrap(), 2);
    }
    // every run is in the history, with its policy's name
    let names: Vec<&str> = m.history().map(|r| r.policy).collect();
    for n in ["max", "min", "fair", "tmem-nopi", "greedy-nopi", "tmem"] {
        assert!(names.contains(&n), "{names:?}");
    }
    let _ = Event::ReportsSuppressed { count: 0 };
    let _ = Kind::Stack;
}

#[test]
#[ignore = "needs root (SCHED_FIFO threads: only real-time threads are in T)"]
fn a_component_that_dies_within_a_period_leaves_no_stale_state_and_its_share_returns() {
    mantle_testsupport::require_root("SCHED_FIFO");
    let spec = SystemFile::parse(&format!(
        "[limits]\nstacks=8\nhold_action='restart'\n[policy]\nname='tmem'\nperiod_ms=50\n\
         [[component]]\nname='s'\nexec=['{DEMO}','echo']\nstacks=1\nmax_stacks=4\n\
         [[component]]\nname='t'\nexec=['{DEMO}','echo']\nstacks=2\nmax_stacks=4\n"
    ))
    .unwrap();
    let mut m = Manager::up(spec).unwrap();
    let s = m.server("s").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // four FIFO threads queue on s and report 20 ms tardiness per job,
    // before, across and after s's death (the same tids all along)
    let ts: Vec<_> = (0..4)
        .map(|k| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                mantle_sys::supervise::set_fifo(10 + k).unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = s.invoke(1, &[30]);
                    let _ = s.invoke(11, &[20_000]);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let grew = run_until(&mut m, Duration::from_secs(10), |m| desired(m, "s") >= 3);
    assert!(grew.is_some(), "tmem never grew s: {:?}", m.status());
    assert_eq!(m.status().policy.tardiness_rejected, 0);
    // s dies in the middle of a period, its contexts busy
    let _ = s.invoke(2, &[]);
    let (mut died, mut restarted) = (None, None);
    let t0 = Instant::now();
    while restarted.is_none() && t0.elapsed() < Duration::from_secs(10) {
        // a tick handles deaths and restarts before its policy run
        let runs = m.status().policy.runs;
        for e in m.tick() {
            match e {
                Event::Died { component, .. } if component == "s" => died = Some(runs),
                Event::Restarted {
                    component, epoch, ..
                } if component == "s" => {
                    assert_eq!(epoch, 1);
                    restarted = Some(runs);
                    // its share went back to the pool: it starts again at
                    // the minimum (before: its old δ^j, 3 or 4)
                    assert_eq!(desired(&m, "s"), 1, "{:?}", m.status());
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (died, restarted) = (died.expect("s died"), restarted.expect("s restarted"));
    // the runs while it was down decided nothing for it
    for r in m.history().filter(|r| r.run > died && r.run <= restarted) {
        assert!(
            r.decisions.iter().all(|d| d.component != "s"),
            "run {} decided for a dead s: {:?}",
            r.run,
            r.decisions
        );
    }
    // after the restart the same threads' reports count from the new
    // instance's zero (before: differences against the dead instance's
    // counters, negative, refused), and tmem grows s again
    let again = run_until(&mut m, Duration::from_secs(10), |m| desired(m, "s") >= 2);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in ts {
        t.join().unwrap();
    }
    let st = m.status();
    assert!(again.is_some(), "tmem never grew the restarted s: {st:?}");
    assert_eq!(st.policy.tardiness_rejected, 0, "{st:?}");
    assert!(m
        .history()
        .any(|r| r.run > restarted && !r.tardiness.is_empty()));
    assert_eq!(s.invoke(0, &[1, 0, 0, 0, 0, 2]).unwrap(), 3);
}
