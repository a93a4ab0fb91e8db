//! Probes of perf events: the hardware PMU (cpu-cycles), software events
//! (cpu-clock, per process and system-wide) and kprobes (through the
//! kprobe PMU, or tracefs).

use std::path::{Path, PathBuf};

use super::caps::{CAP_PERFMON, CAP_SYS_ADMIN};
use super::prog::Ctx;
use super::words::errno_words;
use super::{sysctl, Feature};
use crate::perf::{
    attr, perf_event_open, PerfEventAttr, PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_SW_CPU_CLOCK,
    PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE,
};

/// Opens (disabled) and closes at once a perf event. Ok(()) or the errno.
pub(super) fn perf_open(mut attr: PerfEventAttr, pid: i32, cpu: i32) -> Result<(), i32> {
    attr.flags |= attr::DISABLED;
    perf_event_open(&attr, pid, cpu)
        .map(drop)
        .map_err(|e| e.raw_os_error().unwrap_or(0))
}

pub(super) fn perf_denied(e: i32, ctx: &Ctx) -> String {
    let paranoid = sysctl("perf_event_paranoid")
        .map(|v| v.to_string())
        .unwrap_or_else(|| "?".into());
    if ctx.caps.has(CAP_PERFMON) || ctx.caps.has(CAP_SYS_ADMIN) {
        format!("{} despite CAP_PERFMON", errno_words(e))
    } else {
        format!(
            "{} — kernel.perf_event_paranoid is {paranoid} and CAP_PERFMON is missing",
            errno_words(e)
        )
    }
}

pub(super) fn probe_pmu_hardware(ctx: &Ctx) -> Feature {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_HARDWARE,
        config: PERF_COUNT_HW_CPU_CYCLES,
        flags: attr::EXCLUDE_KERNEL | attr::EXCLUDE_HV,
        ..Default::default()
    };
    let (available, detail) = match perf_open(attr, 0, -1) {
        Ok(()) => (true, "cpu-cycles counter opened on this process".to_string()),
        Err(e @ (libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV)) => (
            false,
            format!(
                "cpu-cycles refused: {}: no hardware PMU (usual in VMs); the profiler falls back to cpu-clock",
                errno_words(e)
            ),
        ),
        Err(e @ (libc::EACCES | libc::EPERM)) => (false, format!("cpu-cycles refused: {}", perf_denied(e, ctx))),
        Err(e) => (false, format!("cpu-cycles refused: {}", errno_words(e))),
    };
    Feature {
        id: "pmu_hardware",
        name: "hardware PMU (cpu-cycles)".into(),
        available,
        detail,
        needed_by: "profiler",
    }
}

pub(super) fn probe_perf_software(ctx: &Ctx) -> Feature {
    let attr = |flags| PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        config: PERF_COUNT_SW_CPU_CLOCK,
        flags,
        ..Default::default()
    };
    let (available, detail) = match perf_open(attr(0), 0, -1) {
        Ok(()) => {
            // The profiler samples all tasks per CPU; say whether that works too.
            let wide = match perf_open(attr(0), -1, 0) {
                Ok(()) => "system-wide (all tasks on CPU 0) too".to_string(),
                Err(e) => format!("system-wide refused: {}", perf_denied(e, ctx)),
            };
            (true, format!("cpu-clock opened on this process; {wide}"))
        }
        Err(e @ (libc::EACCES | libc::EPERM)) => {
            // perf_event_paranoid 2 still allows user-mode-only counting.
            match perf_open(attr(attr::EXCLUDE_KERNEL | attr::EXCLUDE_HV), 0, -1) {
                Ok(()) => (
                    true,
                    format!(
                        "cpu-clock opened on this process in user mode only (with kernel: {})",
                        perf_denied(e, ctx)
                    ),
                ),
                Err(_) => (false, format!("cpu-clock refused: {}", perf_denied(e, ctx))),
            }
        }
        Err(e) => (false, format!("cpu-clock refused: {}", errno_words(e))),
    };
    Feature {
        id: "perf_software",
        name: "software perf events (cpu-clock)".into(),
        available,
        detail,
        needed_by: "profiler",
    }
}

/// The tracefs file `name`, from either usual tracefs mount point.
pub(super) fn tracefs_file(name: &str) -> Option<PathBuf> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

pub(super) fn probe_kprobes() -> Feature {
    let feature = |available, detail| Feature {
        id: "kprobes",
        name: "kprobes".into(),
        available,
        detail,
        needed_by: "profiler (optional)",
    };
    let pmu_type = std::fs::read_to_string("/sys/bus/event_source/devices/kprobe/type")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    if let Some(ty) = pmu_type {
        // Create (disabled) and remove at once a kprobe on vfs_read through
        // the kprobe PMU, as libbpf does to attach kprobe programs.
        let sym = c"vfs_read";
        let attr = PerfEventAttr {
            type_: ty,
            config1: sym.as_ptr() as u64,
            ..Default::default()
        };
        return match perf_open(attr, -1, 0) {
            Ok(()) => feature(
                true,
                "kprobe on vfs_read created through the kprobe PMU".into(),
            ),
            Err(e) => feature(
                false,
                format!(
                    "kprobe PMU present but refused a kprobe on vfs_read: {}",
                    errno_words(e)
                ),
            ),
        };
    }
    if let Some(p) = tracefs_file("kprobe_events") {
        return feature(true, format!("{} present (no kprobe PMU)", p.display()));
    }
    let tracefs = crate::os::is_mounted("/sys/kernel/tracing", "tracefs")
        || crate::os::is_mounted("/sys/kernel/debug/tracing", "tracefs");
    feature(
        false,
        if tracefs {
            "no kprobe PMU and no kprobe_events in tracefs: kprobes are compiled out".into()
        } else {
            "no kprobe PMU in /sys/bus/event_source/devices: kprobes are compiled out (tracefs not mounted, so kprobe_events was not checked)".into()
        },
    )
}
