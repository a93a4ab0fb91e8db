//! Kernel feature probes for `mantle doctor` and for start-up checks.
//!
//! Every probe really tries the mechanism it reports on: it loads a minimal
//! eBPF program of the type in question, creates the map, opens the perf
//! event, installs the seccomp filter in a throw-away child process, and so
//! on. Nothing is guessed from the kernel version, and nothing is left
//! attached: programs are only loaded (never attached) and every file
//! descriptor is closed before the probe returns.
//!
//! [`probe_all`] never panics: a probe that cannot run becomes a [`Feature`]
//! with `available == false` and a detail in plain words.
//!
//! Besides the features, three sysctls are reported as entries whose id
//! starts with `sysctl_`: for those `available` means "the value could be
//! read" and the value (with its meaning) is in `detail`; [`sysctl`] returns
//! the raw value.
//!
//! The probes are split by area, one file each: [`report`] (the result
//! types), `fs` (kernel BTF, bpffs, cgroup v2), `prog` (BPF program types
//! and attach targets), `map` (BPF map types), `perf` (PMU, software
//! events, kprobes), `isolation` (seccomp user notification, Syscall User
//! Dispatch), `caps` (root and capabilities), `sysctl` and `words` (errno
//! in plain words). They make their system calls through the mechanism
//! modules ([`crate::perf`], [`crate::seccomp`], [`crate::sud`],
//! [`crate::os`]) and libbpf-rs (`ProgramType`/`MapType::is_supported`).
//! Still raw here, because neither libbpf-rs nor the `bpf` module offers
//! them yet: loading a program from bare instructions with a chosen attach
//! BTF id (`bpf_prog_load`, in `prog`), looking a BTF type up by name *and
//! kind* (`btf__find_by_name_kind`; libbpf-rs's `type_by_name` ignores the
//! kind, and `bpf_iter_task` is both a struct and a function), and the
//! mmapable array's create, mmap and lookup (in `map`), whose detail needs
//! the exact errno that libbpf-rs's error type does not expose.

mod caps;
mod fs;
mod isolation;
mod map;
mod perf;
mod prog;
pub mod report;
mod sysctl;
#[cfg(test)]
mod tests;
mod words;

use std::path::Path;

use libbpf_rs::libbpf_sys as sys;
use libbpf_rs::MapType;

pub use fs::{cgroup1_freezer_mount, cgroup2_mount};
pub use prog::TAGS_TRACEPOINTS;
pub use report::{Feature, Report};

use caps::{probe_cap, probe_root, Caps, CAPS};
use fs::{probe_bpffs, probe_btf, probe_cgroup2};
use isolation::{
    probe_seccomp_sync_wake_up, probe_seccomp_user_notif, probe_syscall_user_dispatch,
};
use map::{probe_map_libbpf, probe_mmapable_array};
use perf::{probe_kprobes, probe_perf_software, probe_pmu_hardware};
use prog::{
    probe_btf_prog, probe_plain_prog, probe_struct_ops, probe_tags_tracepoints, Ctx, VmlinuxBtf,
    BTF_PROGS, PLAIN_PROGS, PROG_ORDER,
};
use sysctl::{probe_sysctl, SYSCTLS};

/// Runs every probe. Takes a few tens of milliseconds; never panics.
pub fn probe_all() -> Report {
    let caps = Caps::read();
    let mut features = Vec::with_capacity(40);
    let mut run = |id: &'static str, f: &dyn Fn() -> Feature| {
        let feature =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| Feature {
                id,
                name: id.to_string(),
                available: false,
                detail: "the probe itself failed (internal error)".into(),
                needed_by: "all",
            });
        features.push(feature);
    };

    run("btf", &probe_btf);
    run("bpffs", &probe_bpffs);
    run("cgroup2", &probe_cgroup2);

    // The vmlinux BTF is parsed once and shared by the probes that need an
    // attach target (tp_btf, iter, lsm, fentry).
    let vmlinux = VmlinuxBtf::load();
    let ctx = Ctx {
        caps,
        vmlinux: vmlinux.as_ref().map_err(|e| *e),
    };
    for &id in PROG_ORDER {
        if let Some(p) = PLAIN_PROGS.iter().find(|p| p.id == id) {
            run(id, &|| probe_plain_prog(p, &ctx));
        } else if let Some(p) = BTF_PROGS.iter().find(|p| p.id == id) {
            run(id, &|| probe_btf_prog(p, &ctx));
        } else {
            run(id, &|| probe_struct_ops(&ctx));
        }
    }

    run("map_task_storage", &|| {
        probe_map_libbpf(
            "map_task_storage",
            "BPF map type task storage",
            MapType::TaskStorage,
            "tags",
            &ctx,
        )
    });
    run("map_sk_storage", &|| {
        probe_map_libbpf(
            "map_sk_storage",
            "BPF map type socket storage",
            MapType::SkStorage,
            "tags",
            &ctx,
        )
    });
    run("map_mmapable_array", &|| probe_mmapable_array(&ctx));
    run("tracepoints_tags", &|| probe_tags_tracepoints(&ctx));
    run("map_ringbuf", &|| {
        probe_map_libbpf(
            "map_ringbuf",
            "BPF map type ring buffer",
            MapType::RingBuf,
            "tags, profiler",
            &ctx,
        )
    });

    run("kprobes", &probe_kprobes);
    run("pmu_hardware", &|| probe_pmu_hardware(&ctx));
    run("perf_software", &|| probe_perf_software(&ctx));
    run("seccomp_user_notif", &probe_seccomp_user_notif);
    run("seccomp_sync_wake_up", &probe_seccomp_sync_wake_up);
    run("syscall_user_dispatch", &probe_syscall_user_dispatch);

    run("root", &probe_root);
    for c in CAPS {
        run(c.id, &|| probe_cap(c, caps));
    }
    for s in SYSCTLS {
        run(s.id, &|| probe_sysctl(s));
    }

    Report {
        kernel: kernel_release(),
        features,
    }
}

pub use crate::os::kernel_release;

/// A `kernel.*` sysctl as an integer, e.g. `sysctl("perf_event_paranoid")`.
pub fn sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(Path::new("/proc/sys/kernel").join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// LINUX_VERSION_CODE of the running kernel, from its release string.
pub(super) fn kernel_version_code() -> u32 {
    let rel = kernel_release();
    let mut parts = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let a = parts.next().unwrap_or(0);
    let b = parts.next().unwrap_or(0);
    let c = parts.next().unwrap_or(0).min(255);
    (a << 16) | (b << 8) | c
}
