//! The model against what queueing says it must do.

use mantle_lockmodel::{fit_handoff, simulate, speedup, Call, Dist, LockRef, ModelError, Workload};

fn c(ns: u64) -> Dist {
    Dist::Const { ns }
}

fn work(cpus: usize, user: Dist, call: Call) -> Workload {
    Workload {
        cpus,
        guests_per_cpu: 1,
        calls_per_guest: 2_000,
        user,
        call,
        handoff_ns: 0,
        seed: 7,
    }
}

#[test]
fn no_time_is_lost_on_any_cpu_in_either_design() {
    let exp = |m: f64| Dist::Exp { mean_ns: m };
    for call in [
        Call::giant(exp(300.0), exp(700.0)),
        Call::fine(exp(300.0), exp(200.0), &[(1, exp(100.0)), (2, exp(50.0))]),
    ] {
        for cpus in [1, 2, 3, 8] {
            let mut w = work(cpus, exp(1_000.0), call.clone());
            w.handoff_ns = 40;
            let o = simulate(&w).unwrap();
            assert_eq!(
                o.finish_ns.iter().sum::<u64>(),
                o.user_ns + o.exec_ns + o.wait_ns
            );
            assert_eq!(o.makespan_ns, *o.finish_ns.iter().max().unwrap());
            let acq: u64 = o.locks.iter().map(|l| l.acquisitions).sum();
            let locked = call.segments.iter().filter(|s| s.lock.is_some()).count() as u64;
            assert_eq!(acq, cpus as u64 * 2_000 * locked);
        }
    }
}

#[test]
fn one_cpu_never_waits() {
    let o = simulate(&work(1, c(10), Call::giant(c(5), c(100)))).unwrap();
    assert_eq!((o.wait_ns, o.locks[0].contended), (0, 0));
    assert_eq!(o.makespan_ns, 2_000 * 115);
}

#[test]
fn the_giant_lock_caps_throughput_at_one_call_per_hold() {
    // Constant times: makespan = max(per-CPU loop, all holds in a row),
    // up to one loop of start-up.
    let (u, h) = (1_000u64, 400u64);
    for cpus in [1usize, 2, 3, 4, 8, 16] {
        let o = simulate(&work(cpus, c(u), Call::giant(c(0), c(h)))).unwrap();
        let bound = (2_000 * (u + h)).max(cpus as u64 * 2_000 * h);
        assert!(
            o.makespan_ns >= bound,
            "{cpus}: {} < {bound}",
            o.makespan_ns
        );
        assert!(
            o.makespan_ns <= bound + u + cpus as u64 * h,
            "{cpus}: {} vs {bound}",
            o.makespan_ns
        );
    }
}

#[test]
fn giant_speedup_stays_under_its_bound_and_contention_grows_with_call_rate() {
    let h = 500.0;
    let mut last = -1.0;
    // K from long to short: the share of waiting must grow.
    for k in [100_000.0, 10_000.0, 2_000.0, 500.0] {
        let w = work(
            2,
            Dist::Exp { mean_ns: k },
            Call::giant(c(0), Dist::Exp { mean_ns: h }),
        );
        let s = speedup(&w).unwrap();
        let bound = ((k + h) / h).min(2.0);
        assert!(s.speedup <= bound * 1.03, "k={k}: {} > {bound}", s.speedup);
        let cont = s.many.contention();
        assert!(
            cont > last,
            "k={k}: contention {cont} did not grow from {last}"
        );
        last = cont;
    }
}

#[test]
fn run_queue_locks_alone_scale_linearly() {
    for cpus in [2usize, 4, 16, 64] {
        let w = work(cpus, c(1_000), Call::fine(c(100), c(300), &[]));
        let s = speedup(&Workload {
            calls_per_guest: 200,
            ..w
        })
        .unwrap();
        assert!(
            (s.speedup - cpus as f64).abs() < 1e-9,
            "{cpus}: {}",
            s.speedup
        );
        assert_eq!(s.many.wait_ns, 0);
    }
}

#[test]
fn fine_beats_giant_at_every_call_rate() {
    for k in [1_000u64, 10_000, 100_000] {
        for cpus in [2usize, 4, 8] {
            let exp = |m: f64| Dist::Exp { mean_ns: m };
            let g = work(cpus, exp(k as f64), Call::giant(exp(500.0), exp(800.0)));
            let f = work(
                cpus,
                exp(k as f64),
                Call::fine(exp(500.0), exp(700.0), &[(1, exp(100.0))]),
            );
            let (g, f) = (speedup(&g).unwrap().speedup, speedup(&f).unwrap().speedup);
            // Where neither waits, both sit at the CPU count and differ by
            // the draws alone (about 1/sqrt(2,000) of it).
            assert!(
                f >= g - 0.03 * cpus as f64,
                "k={k} cpus={cpus}: fine {f} < giant {g}"
            );
        }
    }
}

#[test]
fn a_handoff_is_paid_when_the_lock_changes_cpu() {
    // No user work: the two CPUs alternate on the lock.
    let mut w = work(2, c(0), Call::giant(c(0), c(100)));
    w.handoff_ns = 30;
    let o = simulate(&w).unwrap();
    let l = &o.locks[0];
    assert_eq!(l.acquisitions, 4_000);
    // Every acquisition but the very first follows the other CPU.
    assert_eq!(l.hold_ns, 4_000 * 100 + 3_999 * 30);
}

#[test]
fn the_fitted_handoff_reproduces_a_known_one() {
    let exp = |m: f64| Dist::Exp { mean_ns: m };
    let mut w = work(2, exp(2_000.0), Call::giant(exp(300.0), exp(600.0)));
    w.handoff_ns = 250;
    let target = speedup(&w).unwrap().speedup;
    let fitted = fit_handoff(&w, target, 10_000).unwrap();
    let again = speedup(&Workload {
        handoff_ns: fitted,
        ..w.clone()
    })
    .unwrap()
    .speedup;
    assert!(
        (again - target).abs() < 1e-3,
        "fitted {fitted}: {again} vs {target}"
    );
    assert!(fitted.abs_diff(250) <= 5, "fitted {fitted}, not 250");
    assert!(
        fit_handoff(&w, 2.5, 10_000).is_err(),
        "a 2-CPU speedup of 2.5 was fitted"
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let exp = |m: f64| Dist::Exp { mean_ns: m };
    let w = work(
        4,
        exp(900.0),
        Call::fine(exp(100.0), exp(200.0), &[(3, exp(80.0))]),
    );
    assert_eq!(simulate(&w).unwrap(), simulate(&w).unwrap());
    let other = simulate(&Workload {
        seed: 8,
        ..w.clone()
    })
    .unwrap();
    assert_ne!(simulate(&w).unwrap().makespan_ns, other.makespan_ns);
}

#[test]
fn empirical_samples_are_drawn_from() {
    let w = work(
        1,
        Dist::Empirical {
            samples_ns: vec![10, 30],
        },
        Call::giant(c(0), c(0)),
    );
    let o = simulate(&w).unwrap();
    // 2,000 draws of 10 or 30: both occur, the mean is near 20.
    assert!(o.user_ns > 2_000 * 10 && o.user_ns < 2_000 * 30);
    assert!((o.user_ns as f64 / 2_000.0 - 20.0).abs() < 2.0);
}

#[test]
fn bad_workloads_are_refused() {
    let ok = work(2, c(1), Call::giant(c(1), c(1)));
    let bad = |f: &dyn Fn(&mut Workload)| {
        let mut w = ok.clone();
        f(&mut w);
        simulate(&w).unwrap_err()
    };
    assert_eq!(bad(&|w| w.cpus = 0), ModelError::Cpus(0));
    assert_eq!(bad(&|w| w.cpus = 5_000), ModelError::Cpus(5_000));
    assert_eq!(bad(&|w| w.guests_per_cpu = 0), ModelError::Guests);
    assert_eq!(bad(&|w| w.calls_per_guest = 0), ModelError::Calls);
    assert_eq!(bad(&|w| w.call.segments.clear()), ModelError::EmptyCall);
    assert!(matches!(
        bad(&|w| w.user = Dist::Empirical { samples_ns: vec![] }),
        ModelError::NoSamples(_)
    ));
    assert!(matches!(
        bad(&|w| w.user = Dist::Exp { mean_ns: f64::NAN }),
        ModelError::BadMean(..)
    ));
    assert!(matches!(
        bad(&|w| w.user = Dist::Exp { mean_ns: -1.0 }),
        ModelError::BadMean(..)
    ));
    assert!(matches!(
        bad(&|w| w.calls_per_guest = u64::MAX),
        ModelError::TooLarge(_)
    ));
    let _ = LockRef::Giant;
}

#[test]
fn a_workload_reads_from_json() {
    let w: Workload = serde_json::from_str(
        r#"{"cpus":2,"guests_per_cpu":1,"calls_per_guest":10,
            "user":{"kind":"exp","mean_ns":1000.0},
            "call":{"segments":[{"lock":null,"time":{"kind":"const","ns":200}},
                                {"lock":"giant","time":{"kind":"empirical","samples_ns":[300,500]}}]},
            "handoff_ns":0,"seed":1}"#,
    )
    .unwrap();
    assert_eq!(w.call.segments[1].lock, Some(LockRef::Giant));
    simulate(&w).unwrap();
}
