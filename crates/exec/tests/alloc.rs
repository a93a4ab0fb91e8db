//! No allocation on the protected path's interposition of getppid (issue
//! 10: "no allocation ... on the interposition path after start-up").
//!
//! A global allocator of this test binary counts the allocations made on
//! the thread that runs the executive, once it is serving. Two runs of
//! the same guest, one making 20 000 more interposed getppid calls than the
//! other (`--perform getppid`: the executive answers each with a system
//! call of its own): any allocation per call would show as ~20 000 more.
//! What the loop does on a timer (the RPC sweep every 100 ms) may allocate
//! a little; the bound leaves room for that and nothing per call.

use mantle_exec::agents::{from_specs, AgentSpecs};
use mantle_exec::executive::{End, Executive, GuestSpec, Options};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is passed to the system allocator unchanged; the
// count is a side effect on an atomic (no allocation in the allocator).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: p came from System.alloc with l.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as for alloc and dealloc.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn ppid_guest() -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/guests/ppid.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("alloc-ppid-{}", std::process::id()));
    let st = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success(), "cc {}", src.display());
    out
}

/// Allocations on the executive's thread while it serves `calls` getppid.
fn allocations_serving(guest: &std::path::Path, calls: u32) -> u64 {
    let specs = AgentSpecs {
        perform: vec!["getppid".into()],
        ..Default::default()
    };
    let agents = from_specs(&specs, Box::new(std::io::sink()))
        .unwrap()
        .agents;
    let me = std::process::id().to_string();
    let ex = Executive::start(
        Options {
            priority: None,
            sync_wake: true,
            fail_open: false,
            status_dir: None,
            realtime: false,
            ..Default::default()
        },
        vec![GuestSpec {
            name: "ppid".into(),
            argv: vec![guest.display().to_string(), me, calls.to_string()],
            agents,
            sched: None,
            qos: None,
            enforce: Default::default(),
            rpc_to: None,
        }],
        Box::new(|m| eprintln!("executive: {m}")),
    )
    .unwrap();
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.with(|c| c.set(true));
    let ends = ex.run();
    COUNTING.with(|c| c.set(false));
    let n = ALLOCS.load(Ordering::SeqCst);
    assert_eq!(ends[0].end, End::Exited(0), "every getppid answered right");
    assert_eq!(
        ends[0].calls,
        vec![("getppid".to_string(), u64::from(calls))]
    );
    n
}

#[test]
fn serving_getppid_does_not_allocate_per_call() {
    let g = ppid_guest();
    let few = allocations_serving(&g, 100);
    let many = allocations_serving(&g, 20_100);
    eprintln!("allocations while serving: {few} for 100 calls, {many} for 20100 calls");
    assert!(
        many < few + 200,
        "{} more allocations for 20000 more calls",
        many.saturating_sub(few)
    );
}
