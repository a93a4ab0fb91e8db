//! `mantle run --offload`: the application kernel (crates/offload,
//! docs/offload.md). Checks the CPUs and the command, then replaces this
//! process with the command, the offload library preloaded: no executive
//! runs beside it, and the command's end (a status, or the signal that
//! killed it) is mantle's.

use crate::exit::{Failure, EXIT_RUN_CANNOT, EXIT_RUN_ERROR, EXIT_RUN_NOT_FOUND, EXIT_USAGE};
use mantle_offload::{allowed_cpus, online_cpus, parse_cpu_list, Cpus, OffloadError};
use std::os::unix::process::CommandExt;

/// Whether this kernel has Syscall User Dispatch (Linux 5.11+): turned on
/// and off again on a thread of its own, with a selector that allows.
fn have_sud() -> bool {
    static SEL: mantle_sys::sud::Selector = mantle_sys::sud::Selector::new();
    std::thread::spawn(|| {
        let ok = mantle_sys::sud::enable(&SEL, 0, 4096).is_ok();
        if ok {
            let _ = mantle_sys::sud::disable();
        }
        ok
    })
    .join()
    .unwrap_or(false)
}

/// Runs `command` offloaded; returns only on failure.
pub fn run(command: &[String], boot: Option<u32>, app: Option<&str>) -> Result<(), Failure> {
    let own = |e: OffloadError| Failure::new(EXIT_RUN_ERROR, e.to_string());
    let online = online_cpus().map_err(own)?;
    let allowed = allowed_cpus().map_err(own)?;
    let app = app
        .map(parse_cpu_list)
        .transpose()
        .map_err(|e| Failure::new(EXIT_USAGE, format!("--app-cpus: {e}")))?;
    let cpus = Cpus::choose(boot, app.as_ref(), &online, &allowed).map_err(|e| {
        let what = match e {
            OffloadError::BadAppCpu(..) => "--app-cpus",
            _ => "--bootstrap-cpu",
        };
        Failure::new(EXIT_USAGE, format!("{what}: {e}"))
    })?;
    let prog = command
        .first()
        .ok_or_else(|| Failure::new(EXIT_USAGE, "no command to run"))?;
    let exe = mantle_exec::fast::resolve(prog)
        .ok_or_else(|| Failure::new(EXIT_RUN_NOT_FOUND, format!("{prog}: command not found")))?;
    mantle_offload::check_program(&exe).map_err(|e| match e {
        OffloadError::Static(_) => Failure::new(EXIT_RUN_CANNOT, e.to_string()),
        e => Failure::new(EXIT_RUN_ERROR, e.to_string()),
    })?;
    let lib = mantle_offload::library();
    if !lib.is_file() {
        return Err(Failure::new(
            EXIT_RUN_ERROR,
            format!(
                "{}: the offload library is missing (MANTLE_OFFLOAD_LIB)",
                lib.display()
            ),
        ));
    }
    if !have_sud() {
        return Err(Failure::new(
            EXIT_RUN_ERROR,
            "--offload: this kernel has no Syscall User Dispatch (Linux 5.11+, x86-64 or another architecture with generic entry code)",
        ));
    }
    let err = std::process::Command::new(&exe)
        .arg0(prog)
        .args(&command[1..])
        .envs(mantle_offload::command_env(&cpus, &lib))
        .exec();
    Err(Failure::new(
        EXIT_RUN_CANNOT,
        format!(
            "{}: {}",
            exe.display(),
            crate::exit::plain(&err.to_string())
        ),
    ))
}
