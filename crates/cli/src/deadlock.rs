//! `mantle tag deadlock-guard`: guards a process's synchronous call chains
//! against circular waits (mantle_tags::guard does it), printing each
//! report as it comes, until Ctrl-C, a count or a timeout.

use crate::flags::Who;
use mantle_tags::guard::{Guard, Limits};
use mantle_tags::{Error, Tags, Target};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set on SIGINT/SIGTERM: the guard stops and cleans up.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

pub fn run(
    t: &Tags,
    who: &Who,
    name: Option<String>,
    count: Option<u64>,
    timeout: Option<u32>,
    json: bool,
) -> Result<(), Error> {
    let target = who.target();
    let guard = Guard::start(t, target, name.as_deref())?;
    // SAFETY: installing an async-signal-safe handler that stores a flag.
    unsafe {
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
    }
    eprintln!(
        "mantle: guarding {} with deadlock tag {}; waiting for circular call chains (Ctrl-C to stop)",
        match target {
            Target::Pid(p) => format!("process {p}"),
            Target::Tid(x) => format!("thread {x}"),
        },
        guard.name()
    );
    let seen = guard.watch(
        Limits::new(count, timeout),
        || STOP.load(Ordering::Relaxed),
        |rep| {
            if json {
                println!("{}", serde_json::to_string(rep).unwrap_or_default());
            } else {
                print!("{}", mantle_tags::deadlock::render(rep));
            }
            // Reports are read as they come (often through a pipe).
            use std::io::Write;
            let _ = std::io::stdout().flush();
        },
    )?;
    if seen == 0 {
        eprintln!("mantle: no circular call chain seen");
    }
    Ok(())
}
