//! Probes of BPF program types and their attach targets: each loads a
//! minimal `r0 = k; exit` program of the type (against a target found in
//! the kernel BTF where the type needs one) and closes it at once, never
//! attaching anything; and the tracepoints the tags kernel side needs.

use std::ffi::CString;
use std::fmt::Write as _;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use super::caps::Caps;
use super::perf::tracefs_file;
use super::sys;
use super::words::{errno_words, last_errno, ENOTSUPP};
use super::{kernel_version_code, Feature};
use libbpf_rs::ProgramType;

pub(super) struct Ctx<'a> {
    pub(super) caps: Caps,
    /// The parsed kernel BTF, or the errno libbpf failed with.
    pub(super) vmlinux: Result<&'a VmlinuxBtf, i32>,
}

/// The kernel's BTF, parsed by libbpf; freed on drop.
pub(super) struct VmlinuxBtf(*mut sys::btf);

impl VmlinuxBtf {
    pub(super) fn load() -> Result<VmlinuxBtf, i32> {
        // SAFETY: no arguments; returns an owned btf object or NULL with errno set.
        let p = unsafe { sys::btf__load_vmlinux_btf() };
        if p.is_null() {
            return Err(last_errno());
        }
        Ok(VmlinuxBtf(p))
    }

    /// The names among `names` with no `btf_trace_<name>` typedef.
    pub(super) fn missing_tracepoints<'n>(&self, names: &[&'n str]) -> Vec<&'n str> {
        names
            .iter()
            .copied()
            .filter(|n| {
                self.find(&format!("btf_trace_{n}"), sys::BTF_KIND_TYPEDEF)
                    .is_none()
            })
            .collect()
    }

    /// The BTF id of the type `name` of kind `kind`, if there is one.
    pub(super) fn find(&self, name: &str, kind: u32) -> Option<u32> {
        let c = CString::new(name).ok()?;
        // SAFETY: self.0 is a live btf object; c is NUL-terminated.
        let id = unsafe { sys::btf__find_by_name_kind(self.0, c.as_ptr(), kind) };
        u32::try_from(id).ok().filter(|&id| id > 0)
    }
}

/// The tracepoints the tags kernel side's tp_btf programs attach to.
pub const TAGS_TRACEPOINTS: &[&str] = &[
    "sched_process_fork",
    "sched_process_exit",
    "signal_generate",
    "sys_exit",
    "inet_sock_set_state",
    "sock_send_length",
    "sock_recv_length",
    "sk_data_ready",
    "tcp_sendmsg_locked",
];

pub(super) fn probe_tags_tracepoints(ctx: &Ctx) -> Feature {
    let (available, detail) = match ctx.vmlinux {
        Err(e) => (
            false,
            format!("cannot read the kernel BTF to look for them (errno {e})"),
        ),
        Ok(btf) => {
            let gone = btf.missing_tracepoints(TAGS_TRACEPOINTS);
            if gone.is_empty() {
                (
                    true,
                    format!("all {} are in the kernel BTF", TAGS_TRACEPOINTS.len()),
                )
            } else {
                (false, format!("missing: {}", gone.join(", ")))
            }
        }
    };
    Feature {
        id: "tracepoints_tags",
        name: "tracepoints the tags kernel side attaches to".into(),
        available,
        detail,
        needed_by: "tags",
    }
}

impl Drop for VmlinuxBtf {
    fn drop(&mut self) {
        // SAFETY: self.0 came from btf__load_vmlinux_btf and is freed once.
        unsafe { sys::btf__free(self.0) }
    }
}

#[derive(Debug)]
pub(super) struct LoadError {
    pub(super) errno: i32,
    /// The last line of the verifier log, if one was asked for and written.
    pub(super) log_tail: Option<String>,
}

/// Loads `r0 = ret; exit` with the given type and attach data, then closes
/// it at once. Never attaches anything.
pub(super) fn try_load(
    prog_type: sys::bpf_prog_type,
    attach_type: sys::bpf_attach_type,
    attach_btf_id: u32,
    ret: i32,
) -> Result<(), LoadError> {
    let mut insns = [sys::bpf_insn::default(); 2];
    insns[0].code = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K, dst r0
    insns[0].imm = ret;
    insns[1].code = 0x95; // BPF_JMP | BPF_EXIT
    let mut log = vec![0u8; 4096];
    let mut opts = sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<sys::bpf_prog_load_opts>() as _,
        expected_attach_type: attach_type,
        attach_btf_id,
        // Only read by kernels before 5.0, for kprobe programs.
        kern_version: kernel_version_code(),
        // With log_level 0 libbpf retries with a log only if the load fails.
        log_buf: log.as_mut_ptr().cast(),
        log_size: log.len() as u32,
        ..Default::default()
    };
    // SAFETY: insns, the license string and log outlive the call; opts.sz
    // is the size of the struct libbpf was built with.
    let fd = unsafe {
        sys::bpf_prog_load(
            prog_type,
            c"mantle_probe".as_ptr(),
            c"GPL".as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            &mut opts,
        )
    };
    if fd >= 0 {
        // SAFETY: fd is a new program fd that nothing else owns.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        return Ok(());
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let log_tail = String::from_utf8_lossy(&log[..end])
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| {
            !l.is_empty() && !l.starts_with("processed ") && !l.starts_with("verification time")
        })
        .map(str::to_string);
    Err(LoadError {
        errno: -fd,
        log_tail,
    })
}

/// How a failed load reads in `mantle doctor`.
pub(super) fn explain_load(e: &LoadError, ctx: &Ctx, ftrace_based: bool) -> String {
    let mut s = format!("refused at load: {}", errno_words(e.errno));
    match e.errno {
        libc::EPERM if !ctx.caps.bpf_tracing() => {
            s.push_str(" — needs root, or CAP_BPF with CAP_PERFMON");
        }
        libc::EPERM if ftrace_based => {
            s.push_str(" — this kernel blocks ftrace-based attachment (BPF trampolines)");
        }
        libc::EPERM => {
            s.push_str(" — blocked by the kernel (lockdown or a security module) despite the needed capabilities");
        }
        libc::EINVAL | ENOTSUPP | libc::EOPNOTSUPP | libc::E2BIG => {
            s.push_str(" — probably not offered by this kernel");
        }
        _ => {}
    }
    if let Some(t) = &e.log_tail {
        if e.errno != libc::EPERM {
            let _ = write!(s, "; verifier: {t}");
        }
    }
    s
}

/// The order in which program types are reported.
pub(super) const PROG_ORDER: &[&str] = &[
    "prog_tracepoint",
    "prog_raw_tp",
    "prog_tp_btf",
    "prog_perf_event",
    "prog_uprobe",
    "prog_sockops",
    "prog_cgroup_skb",
    "prog_cgroup_connect4",
    "prog_cgroup_connect_unix",
    "prog_iter_task",
    "prog_struct_ops",
    "prog_lsm",
    "prog_fentry",
];

pub(super) struct PlainProg {
    pub(super) id: &'static str,
    pub(super) name: &'static str,
    pub(super) prog_type: sys::bpf_prog_type,
    pub(super) attach_type: sys::bpf_attach_type,
    pub(super) ret: i32,
    pub(super) needed_by: &'static str,
}

pub(super) const PLAIN_PROGS: &[PlainProg] = &[
    PlainProg {
        id: "prog_tracepoint",
        name: "BPF program type tracepoint",
        prog_type: sys::BPF_PROG_TYPE_TRACEPOINT,
        attach_type: 0,
        ret: 0,
        needed_by: "tags",
    },
    PlainProg {
        id: "prog_raw_tp",
        name: "BPF program type raw_tp",
        prog_type: sys::BPF_PROG_TYPE_RAW_TRACEPOINT,
        attach_type: 0,
        ret: 0,
        needed_by: "tags",
    },
    PlainProg {
        id: "prog_perf_event",
        name: "BPF program type perf_event",
        prog_type: sys::BPF_PROG_TYPE_PERF_EVENT,
        attach_type: 0,
        ret: 0,
        needed_by: "profiler",
    },
    PlainProg {
        id: "prog_uprobe",
        name: "BPF program type uprobe (kprobe type)",
        prog_type: sys::BPF_PROG_TYPE_KPROBE,
        attach_type: 0,
        ret: 0,
        needed_by: "profiler",
    },
    PlainProg {
        id: "prog_sockops",
        name: "BPF program type sockops",
        prog_type: sys::BPF_PROG_TYPE_SOCK_OPS,
        attach_type: 0,
        ret: 1,
        needed_by: "tags",
    },
    PlainProg {
        id: "prog_cgroup_skb",
        name: "BPF program type cgroup_skb",
        prog_type: sys::BPF_PROG_TYPE_CGROUP_SKB,
        attach_type: sys::BPF_CGROUP_INET_EGRESS,
        ret: 1,
        needed_by: "tags",
    },
    PlainProg {
        id: "prog_cgroup_connect4",
        name: "BPF cgroup sock_addr connect4",
        prog_type: sys::BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
        attach_type: sys::BPF_CGROUP_INET4_CONNECT,
        ret: 1,
        needed_by: "tags",
    },
    PlainProg {
        id: "prog_cgroup_connect_unix",
        name: "BPF cgroup sock_addr connect_unix",
        prog_type: sys::BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
        attach_type: sys::BPF_CGROUP_UNIX_CONNECT,
        ret: 1,
        needed_by: "tags",
    },
];

pub(super) fn probe_plain_prog(p: &PlainProg, ctx: &Ctx) -> Feature {
    let (available, mut detail) = match try_load(p.prog_type, p.attach_type, 0, p.ret) {
        Ok(()) => (true, "minimal program loaded".to_string()),
        Err(e) => (false, explain_load(&e, ctx, false)),
    };
    if available && p.prog_type == sys::BPF_PROG_TYPE_KPROBE {
        // Attaching a uprobe goes through the uprobe PMU or tracefs.
        if Path::new("/sys/bus/event_source/devices/uprobe/type").exists() {
            detail.push_str("; uprobe PMU present");
        } else if tracefs_file("uprobe_events").is_some() {
            detail.push_str("; uprobe_events in tracefs");
        } else {
            return Feature {
                id: p.id,
                name: p.name.into(),
                available: false,
                detail: "program type loads, but there is no uprobe PMU and no tracefs uprobe_events to attach it with".into(),
                needed_by: p.needed_by,
            };
        }
    }
    Feature {
        id: p.id,
        name: p.name.into(),
        available,
        detail,
        needed_by: p.needed_by,
    }
}

pub(super) struct BtfProg {
    pub(super) id: &'static str,
    pub(super) name: &'static str,
    pub(super) prog_type: sys::bpf_prog_type,
    pub(super) attach_type: sys::bpf_attach_type,
    /// Candidate attach targets, tried in order, with their BTF kind.
    pub(super) targets: &'static [&'static str],
    pub(super) kind: u32,
    /// Whether the kernel attaches it through a BPF trampoline (ftrace).
    pub(super) ftrace_based: bool,
    /// What a missing target means.
    pub(super) no_target: &'static str,
    pub(super) needed_by: &'static str,
}

pub(super) const BTF_PROGS: &[BtfProg] = &[
    BtfProg {
        id: "prog_tp_btf",
        name: "BPF program type tp_btf",
        prog_type: sys::BPF_PROG_TYPE_TRACING,
        attach_type: sys::BPF_TRACE_RAW_TP,
        targets: &["btf_trace_sched_process_fork"],
        kind: sys::BTF_KIND_TYPEDEF,
        ftrace_based: false,
        no_target: "the kernel BTF has no btf_trace_sched_process_fork",
        needed_by: "tags",
    },
    BtfProg {
        id: "prog_iter_task",
        name: "BPF iterator iter/task",
        prog_type: sys::BPF_PROG_TYPE_TRACING,
        attach_type: sys::BPF_TRACE_ITER,
        targets: &["bpf_iter_task"],
        kind: sys::BTF_KIND_FUNC,
        ftrace_based: false,
        no_target: "the kernel BTF has no bpf_iter_task (task iterators need Linux 5.8)",
        needed_by: "tags",
    },
    BtfProg {
        id: "prog_lsm",
        name: "BPF program type lsm",
        prog_type: sys::BPF_PROG_TYPE_LSM,
        attach_type: sys::BPF_LSM_MAC,
        targets: &["bpf_lsm_file_open"],
        kind: sys::BTF_KIND_FUNC,
        ftrace_based: true,
        no_target: "the kernel BTF has no bpf_lsm_file_open: kernel built without CONFIG_BPF_LSM",
        needed_by: "tags (optional fast path)",
    },
    BtfProg {
        id: "prog_fentry",
        name: "BPF program type fentry",
        prog_type: sys::BPF_PROG_TYPE_TRACING,
        attach_type: sys::BPF_TRACE_FENTRY,
        targets: &["security_file_open", "vfs_read", "bpf_fentry_test1"],
        kind: sys::BTF_KIND_FUNC,
        ftrace_based: true,
        no_target: "none of security_file_open, vfs_read, bpf_fentry_test1 is in the kernel BTF",
        needed_by: "profiler (optional fast path)",
    },
];

pub(super) fn probe_btf_prog(p: &BtfProg, ctx: &Ctx) -> Feature {
    let feature = |available, detail| Feature {
        id: p.id,
        name: p.name.into(),
        available,
        detail,
        needed_by: p.needed_by,
    };
    let btf = match ctx.vmlinux {
        Ok(b) => b,
        Err(e) => {
            return feature(
                false,
                format!(
                    "needs the kernel BTF, which libbpf could not load: {}",
                    errno_words(e)
                ),
            )
        }
    };
    let Some((target, id)) = p
        .targets
        .iter()
        .find_map(|t| btf.find(t, p.kind).map(|id| (*t, id)))
    else {
        return feature(false, p.no_target.into());
    };
    match try_load(p.prog_type, p.attach_type, id, 0) {
        Ok(()) => feature(true, format!("minimal program loaded against {target}")),
        Err(e) => feature(
            false,
            explain_load(&e, ctx, p.ftrace_based).replacen(
                "refused at load",
                &format!("refused at load against {target}"),
                1,
            ),
        ),
    }
}

pub(super) fn probe_struct_ops(ctx: &Ctx) -> Feature {
    // libbpf's probe loads a struct_ops program without a target and
    // expects ENOTSUPP, which proves the type exists.
    let (available, detail) = if matches!(ProgramType::StructOps.is_supported(), Ok(true)) {
        (
            true,
            "program type known (a load without a target is refused with ENOTSUPP, as expected)"
                .to_string(),
        )
    } else {
        match try_load(sys::BPF_PROG_TYPE_STRUCT_OPS, 0, 0, 0) {
            Err(e) if e.errno == ENOTSUPP => (
                true,
                "program type known (refused only for lack of a target)".to_string(),
            ),
            Err(e) => (false, explain_load(&e, ctx, false)),
            Ok(()) => (
                false,
                "libbpf's probe says no, yet a load succeeded".to_string(),
            ),
        }
    };
    Feature {
        id: "prog_struct_ops",
        name: "BPF program type struct_ops".into(),
        available,
        detail,
        needed_by: "executive (optional)",
    }
}
