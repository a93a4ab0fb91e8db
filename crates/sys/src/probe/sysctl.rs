//! The `kernel.*` sysctls that change what mantle may do
//! (unprivileged_bpf_disabled, perf_event_paranoid,
//! perf_event_max_sample_rate), reported with their meaning.

use super::{kernel_version_code, sysctl, Feature};

pub(super) struct SysctlSpec {
    pub(super) id: &'static str,
    pub(super) key: &'static str,
    pub(super) needed_by: &'static str,
    pub(super) meaning: fn(i64) -> &'static str,
}

pub(super) const SYSCTLS: &[SysctlSpec] = &[
    SysctlSpec {
        id: "sysctl_unprivileged_bpf_disabled",
        key: "unprivileged_bpf_disabled",
        needed_by: "all",
        meaning: |v| unprivileged_bpf_meaning(v, kernel_version_code()),
    },
    SysctlSpec {
        id: "sysctl_perf_event_paranoid",
        key: "perf_event_paranoid",
        needed_by: "profiler",
        meaning: |v| match v {
            i64::MIN..=-1 => "no restrictions on perf events",
            0 => "unprivileged users may profile all CPUs, without raw tracepoints",
            1 => "unprivileged users may profile their own processes, kernel included",
            2 => "unprivileged users may profile their own processes in user mode only",
            _ => "unprivileged users may not use perf events",
        },
    },
    SysctlSpec {
        id: "sysctl_perf_event_max_sample_rate",
        key: "perf_event_max_sample_rate",
        needed_by: "profiler",
        meaning: |_| "highest sampling frequency (Hz) a perf event may ask for",
    },
];

/// What kernel.unprivileged_bpf_disabled means on a kernel of version
/// `code` (LINUX_VERSION_CODE). Since Linux 6.5 it only stops users
/// without CAP_BPF from creating maps and loading programs: they may still
/// open pinned objects that file permissions let them open (BPF_OBJ_GET)
/// and use the fds they hold, which is how unprivileged users read mantle's
/// public maps. Before 6.5 it closed bpf(2) to them entirely.
pub(super) fn unprivileged_bpf_meaning(v: i64, code: u32) -> &'static str {
    let whole_syscall = code < (6 << 16 | 5 << 8);
    match (v, whole_syscall) {
        (0, _) => "unprivileged users may create maps and load socket filter programs",
        (1, true) => "only privileged users may use bpf(2), until reboot",
        (2, true) => "only privileged users may use bpf(2) (admin may change it)",
        (1, false) => {
            "only privileged users may create maps and load programs, until reboot; others may still use pinned objects their file permissions allow"
        }
        (2, false) => {
            "only privileged users may create maps and load programs (admin may change it); others may still use pinned objects their file permissions allow"
        }
        _ => "unknown setting",
    }
}

pub(super) fn probe_sysctl(s: &SysctlSpec) -> Feature {
    let (available, detail) = match sysctl(s.key) {
        Some(v) => (true, format!("{v}: {}", (s.meaning)(v))),
        None => (false, format!("could not read /proc/sys/kernel/{}", s.key)),
    };
    Feature {
        id: s.id,
        name: format!("kernel.{}", s.key),
        available,
        detail,
        needed_by: s.needed_by,
    }
}
