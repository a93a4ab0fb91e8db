//! Probes of privilege: running as root, and the effective capabilities
//! (CapEff in /proc/self/status) mantle needs: CAP_BPF, CAP_PERFMON,
//! CAP_SYS_ADMIN, CAP_SYS_RESOURCE.

use super::Feature;

pub(super) use crate::os::{CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYS_RESOURCE};

#[derive(Debug, Clone, Copy)]
pub(super) struct Caps {
    /// CapEff from /proc/self/status; `None` if it could not be read.
    pub(super) eff: Option<u64>,
}

impl Caps {
    pub(super) fn read() -> Caps {
        let eff = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| parse_cap_eff(&s));
        Caps { eff }
    }

    pub(super) fn has(self, cap: u32) -> bool {
        self.eff.is_some_and(|e| e & (1u64 << cap) != 0)
    }

    /// May load every kind of BPF program (tracing ones included).
    pub(super) fn bpf_tracing(self) -> bool {
        self.has(CAP_SYS_ADMIN) || (self.has(CAP_BPF) && self.has(CAP_PERFMON))
    }
}

pub(super) fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

pub(super) struct CapSpec {
    pub(super) id: &'static str,
    pub(super) bit: u32,
    pub(super) name: &'static str,
    pub(super) missing: &'static str,
    pub(super) needed_by: &'static str,
}

pub(super) const CAPS: &[CapSpec] = &[
    CapSpec {
        id: "cap_bpf",
        bit: CAP_BPF,
        name: "capability CAP_BPF",
        missing: "loading BPF programs and creating maps needs CAP_BPF (or CAP_SYS_ADMIN)",
        needed_by: "all",
    },
    CapSpec {
        id: "cap_perfmon",
        bit: CAP_PERFMON,
        name: "capability CAP_PERFMON",
        missing: "tracing programs and system-wide perf events need CAP_PERFMON (or CAP_SYS_ADMIN)",
        needed_by: "tags, profiler",
    },
    CapSpec {
        id: "cap_sys_admin",
        bit: CAP_SYS_ADMIN,
        name: "capability CAP_SYS_ADMIN",
        missing: "mounting bpffs, cgroup work and older kernels' BPF checks need CAP_SYS_ADMIN",
        needed_by: "all",
    },
    CapSpec {
        id: "cap_sys_resource",
        bit: CAP_SYS_RESOURCE,
        name: "capability CAP_SYS_RESOURCE",
        missing: "cannot raise RLIMIT_MEMLOCK; harmless on Linux 5.11 and later, where BPF memory is charged to the cgroup instead",
        needed_by: "executive",
    },
];

pub(super) fn probe_cap(c: &CapSpec, caps: Caps) -> Feature {
    let (available, detail) = match caps.eff {
        None => (
            false,
            "could not read CapEff from /proc/self/status".to_string(),
        ),
        Some(eff) if caps.has(c.bit) => (true, format!("bit {} set in CapEff {eff:016x}", c.bit)),
        Some(eff) => (
            false,
            format!("bit {} not set in CapEff {eff:016x}: {}", c.bit, c.missing),
        ),
    };
    Feature {
        id: c.id,
        name: c.name.into(),
        available,
        detail,
        needed_by: c.needed_by,
    }
}

pub(super) fn probe_root() -> Feature {
    let euid = crate::os::geteuid();
    Feature {
        id: "root",
        name: "running as root".into(),
        available: euid == 0,
        detail: if euid == 0 {
            "effective uid 0".into()
        } else {
            format!(
                "effective uid {euid}: BPF loading, perf events and cgroup setup need root or CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN"
            )
        },
        needed_by: "all",
    }
}
