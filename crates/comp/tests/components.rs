//! Components as real processes (the demo binary), driven by a Manager in
//! the test process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mantle_comp::manager::Event;
use mantle_comp::{Error, Manager, SystemFile};

const DEMO: &str = env!("CARGO_BIN_EXE_mantle-comp-demo");

fn system(extra: &str, comps: &[(&str, &str, &[&str], u32)]) -> SystemFile {
    let mut t = format!("[limits]\n{extra}\n");
    for (name, role, invokes, stacks) in comps {
        let mut exec = vec![format!("'{DEMO}'")];
        exec.extend(role.split(' ').map(|w| format!("'{w}'")));
        let inv: Vec<String> = invokes.iter().map(|s| format!("'{s}'")).collect();
        t += &format!(
            "[[component]]\nname='{name}'\nexec=[{}]\ninvokes=[{}]\nstacks={stacks}\n",
            exec.join(","),
            inv.join(",")
        );
    }
    SystemFile::parse(&t).unwrap()
}

#[test]
fn a_three_component_chain_returns_through_every_link() {
    let m = Manager::up(system(
        "",
        &[
            ("a", "relay b", &["b"], 2),
            ("b", "relay c", &["c"], 2),
            ("c", "echo", &[], 2),
        ],
    ))
    .unwrap();
    let a = m.server("a").unwrap();
    for k in 0..200u64 {
        // a adds 1 each way, b too, c adds a5 = 0
        assert_eq!(a.invoke(0, &[k]).unwrap(), k as i64 + 4);
    }
    let st = m.status();
    assert!(st.components.iter().all(|c| c.alive && c.stacks.busy == 0));
}

#[test]
fn concurrency_beyond_the_cache_blocks_and_completes() {
    let m = Manager::up(system("", &[("s", "echo", &[], 1)])).unwrap();
    let s = m.server("s").unwrap();
    let t0 = Instant::now();
    let ts: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || s.invoke(1, &[30]).unwrap())
        })
        .collect();
    for t in ts {
        assert_eq!(t.join().unwrap(), 0);
    }
    // one context: the four 30 ms calls ran one after another
    assert!(
        t0.elapsed() >= Duration::from_millis(110),
        "{:?}",
        t0.elapsed()
    );
    let c = m.status().components[0].stacks;
    assert!(c.blocks >= 3 && c.block_ns > 0, "{c:?}");
    assert_eq!((c.waiters, c.busy, c.free), (0, 0, 1));
}

#[test]
fn a_server_crash_is_an_error_for_the_caller_not_a_hang() {
    let mut m = Manager::up(system("", &[("s", "echo", &[], 2)])).unwrap();
    let s = m.server("s").unwrap();
    let t0 = Instant::now();
    let r = s.invoke(2, &[]);
    assert!(matches!(r, Err(Error::ServerDied(_))), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(20));
    let ev = m.tick();
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Died { component, .. } if component == "s")),
        "{ev:?}"
    );
    assert!(matches!(s.invoke(0, &[]), Err(Error::ServerDied(_))));
}

#[test]
fn asynchronous_removal_never_takes_a_context_in_use() {
    let mut m = Manager::up(system("", &[("s", "echo", &[], 4)])).unwrap();
    let s = m.server("s").unwrap();
    let ts: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || s.invoke(1, &[150]).unwrap())
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    m.set_desired(0, 1);
    let c = m.status().components[0].stacks;
    assert_eq!(
        (c.allocated, c.busy),
        (4, 4),
        "removal took a busy context: {c:?}"
    );
    assert!(c.relinquish & mantle_abi::comp::REL_STACK != 0);
    for t in ts {
        assert_eq!(t.join().unwrap(), 0);
    }
    m.tick();
    let c = m.status().components[0].stacks;
    assert_eq!((c.allocated, c.free, c.busy), (1, 1, 0), "{c:?}");
    assert_eq!(s.invoke(0, &[1, 0, 0, 0, 0, 2]).unwrap(), 3);
    m.set_desired(0, 4);
    assert_eq!(m.status().components[0].stacks.free, 4);
}

#[test]
fn a_killed_caller_holding_a_context_is_reclaimed_and_its_caller_gets_an_error() {
    let mut m = Manager::up(system(
        "",
        &[("r", "relay e", &["e"], 1), ("e", "echo", &[], 1)],
    ))
    .unwrap();
    let r = m.server("r").unwrap();
    let rpid = m.pids()["r"];
    let t = std::thread::spawn(move || r.invoke(1, &[200]));
    std::thread::sleep(Duration::from_millis(50));
    let e = m
        .status()
        .components
        .into_iter()
        .find(|c| c.name == "e")
        .unwrap();
    assert_eq!(e.stacks.busy, 1);
    mantle_sys::supervise::kill(rpid as i32, libc::SIGKILL).unwrap();
    assert!(matches!(t.join().unwrap(), Err(Error::ServerDied(_))));
    let mut reclaimed = false;
    let t0 = Instant::now();
    while !reclaimed && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
        reclaimed |= m
            .tick()
            .iter()
            .any(|e| matches!(e, Event::Reclaimed { component, caller_pid, .. } if component == "e" && *caller_pid == rpid));
    }
    assert!(reclaimed);
    let e = m.server("e").unwrap();
    assert_eq!(e.invoke(0, &[5]).unwrap(), 5);
}

#[test]
fn a_holder_past_its_bound_is_reported() {
    let mut m = Manager::up(system("hold_bound_ms = 40", &[("s", "echo", &[], 1)])).unwrap();
    let s = m.server("s").unwrap();
    let t = std::thread::spawn(move || s.invoke(1, &[200]).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    let ev = m.tick();
    assert!(
        ev.iter().any(|e| matches!(e, Event::HoldPastBound { component, held_ms, .. } if component == "s" && *held_ms >= 40)),
        "{ev:?}"
    );
    t.join().unwrap();
    std::thread::sleep(Duration::from_millis(10));
    assert!(!m
        .tick()
        .iter()
        .any(|e| matches!(e, Event::HoldPastBound { .. })));
}

#[test]
#[ignore = "needs root (SCHED_FIFO caller)"]
fn priority_inheritance_is_seen_by_the_kernel() {
    mantle_testsupport::require_root("SCHED_FIFO");
    let m = Arc::new(Manager::up(system("", &[("s", "echo", &[], 1)])).unwrap());
    let s = m.server("s").unwrap();
    let pid = m.pids()["s"];
    let ctx = m.comps[0].region.context_tid(0).unwrap();
    let low = {
        let s = s.clone();
        std::thread::spawn(move || s.invoke(1, &[400]).unwrap())
    };
    std::thread::sleep(Duration::from_millis(50));
    let before = mantle_sys::pifutex::kernel_prio(pid, ctx).unwrap();
    assert!(before >= 100, "holder already RT: {before}");
    let high = std::thread::spawn(move || {
        mantle_sys::supervise::set_fifo(50).unwrap();
        mantle_comp::runtime::priority_changed();
        s.invoke(0, &[1]).unwrap()
    });
    let mut boosted = before;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(300) && boosted >= 100 {
        std::thread::sleep(Duration::from_millis(5));
        boosted = mantle_sys::pifutex::kernel_prio(pid, ctx).unwrap();
    }
    // FIFO 50 is kernel prio 99 - 50 = 49
    assert_eq!(
        boosted, 49,
        "holder not boosted (prio {boosted}, was {before})"
    );
    low.join().unwrap();
    assert_eq!(high.join().unwrap(), 1);
}

fn chain() -> Manager {
    Manager::up(system(
        "",
        &[
            ("a", "relay b", &["b"], 2),
            ("b", "relay c", &["c"], 2),
            ("c", "echo", &[], 2),
        ],
    ))
    .unwrap()
}

#[test]
fn a_cbuf_goes_down_a_three_component_chain_and_a_result_comes_back() {
    let m = chain();
    let a = m.server("a").unwrap();
    for n in [8u64, 100, 4096, 65536] {
        let want: u64 = (0..n).map(|i| i % 251).sum();
        assert_eq!(a.invoke(5, &[n]).unwrap(), want as i64, "n={n}");
    }
    let st = m.status();
    let ca = &st.components.iter().find(|c| c.name == "a").unwrap().cbufs;
    assert!(ca.slabs >= 1 && ca.in_use == 0, "{ca:?}");
}

#[test]
fn forged_freed_and_foreign_cbids_are_refused() {
    use mantle_abi::comp::CbufId;
    let m = chain();
    let a = m.server("a").unwrap();
    // a freed cbid, passed down: the leaf refuses it
    assert_eq!(a.invoke(7, &[]).unwrap(), -(libc::ESTALE as i64));
    // slab 0 and slabs nobody made
    assert_eq!(a.invoke(6, &[0]).unwrap(), -(libc::EINVAL as i64));
    for slab in [1000, mantle_abi::comp::MAX_SLABS - 1] {
        assert_eq!(
            a.invoke(6, &[CbufId::new(0, slab, 0).0 as u64]).unwrap(),
            -(libc::ENOENT as i64)
        );
    }
    // a buffer of c (downstream of a): a may not map it
    let c = m.server("c").unwrap();
    let theirs = c.invoke(5, &[]).unwrap();
    assert!(theirs > 0);
    assert_eq!(
        a.invoke(6, &[theirs as u64]).unwrap(),
        -(libc::EACCES as i64)
    );
    // a live cbid with the wrong generation: a forged id
    let id = CbufId(theirs as u32);
    let forged = CbufId::new(id.gen() + 1, id.slab(), id.obj());
    assert_eq!(
        c.invoke(4, &[forged.0 as u64, 8]).unwrap(),
        -(libc::ESTALE as i64)
    );
}

#[test]
fn reclaim_punches_the_holes_and_the_memory_returns() {
    let m = chain();
    let a = m.server("a").unwrap();
    let n = 65536u64; // a 4 MiB slab
    assert!(a.invoke(5, &[n]).unwrap() > 0);
    let before = m.status().components[0].cbufs;
    assert!(before.resident >= n, "{before:?}");
    let back = m.reclaim_cbufs("a").unwrap();
    assert!(back >= 64 * n as usize);
    let after = m.status().components[0].cbufs;
    assert_eq!((after.slabs, after.resident), (0, 0), "{after:?}");
    // the cache refills on demand
    assert!(a.invoke(5, &[n]).unwrap() > 0);
}

#[test]
fn a_killed_cbuf_holder_is_reclaimed() {
    let mut m = Manager::up(system("hold_bound_ms = 30", &[("c", "echo", &[], 2)])).unwrap();
    let c = m.server("c").unwrap();
    let pid = m.pids()["c"];
    let t = std::thread::spawn(move || c.invoke(6, &[5000]));
    std::thread::sleep(Duration::from_millis(100));
    let ev = m.tick();
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::CbufHeldPastBound { component, .. } if component == "c")),
        "{ev:?}"
    );
    assert_eq!(m.status().components[0].cbufs.in_use, 1);
    mantle_sys::supervise::kill(pid as i32, libc::SIGKILL).unwrap();
    assert!(matches!(t.join().unwrap(), Err(Error::ServerDied(_))));
    std::thread::sleep(Duration::from_millis(20));
    let ev = m.tick();
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::CbufsReclaimed { bytes, .. } if *bytes > 0)),
        "{ev:?}"
    );
    assert_eq!(m.status().components[0].cbufs.slabs, 0);
}

#[test]
fn a_c_component_on_libmantle_serves_and_maps_cbufs() {
    let lib = mantle_testsupport::build::libmantle().unwrap();
    let ws = mantle_testsupport::build::workspace();
    let dir = std::env::temp_dir().join(format!("mantle-comp-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("ccomp");
    let libdir = lib.parent().unwrap();
    mantle_testsupport::build::run_cc(
        "ccomp",
        std::process::Command::new("cc")
            .arg("-Wall")
            .arg("-Werror")
            .arg(format!("-I{}", ws.join("include").display()))
            .arg(ws.join("crates/comp/tests/c/ccomp.c"))
            .arg(format!("-L{}", libdir.display()))
            .arg(format!("-Wl,-rpath,{}", libdir.display()))
            .arg("-lmantle")
            .arg("-o")
            .arg(&bin),
    );
    let text = format!(
        "[[component]]\nname='a'\nexec=['{DEMO}','relay','c']\ninvokes=['c']\n\
         [[component]]\nname='c'\nexec=['{}']\n",
        bin.display()
    );
    let m = Manager::up(SystemFile::parse(&text).unwrap()).unwrap();
    let a = m.server("a").unwrap();
    assert_eq!(a.invoke(0, &[40]).unwrap(), 42);
    let want: u64 = (0..1000u64).map(|i| i % 251).sum();
    assert_eq!(a.invoke(5, &[1000]).unwrap(), want as i64);
    assert_eq!(a.invoke(7, &[]).unwrap(), -(libc::ESTALE as i64));
    drop(m);
    let _ = std::fs::remove_dir_all(&dir);
}
