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

use std::ffi::{CStr, CString};
use std::fmt::Write as _;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use libbpf_rs::libbpf_sys as sys;
use serde::Serialize;

/// One thing the kernel may or may not offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Feature {
    /// Stable identifier, e.g. `"prog_tp_btf"`.
    pub id: &'static str,
    /// Human-readable name, e.g. `"BPF program type tp_btf"`.
    pub name: String,
    /// Whether the probe succeeded.
    pub available: bool,
    /// What was tried and what happened, in plain words.
    pub detail: String,
    /// The mantle part(s) that use it: "tags", "profiler", "executive", "all".
    pub needed_by: &'static str,
}

/// The result of [`probe_all`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Kernel release as reported by uname(2), e.g. `"6.18.44"`.
    pub kernel: String,
    /// All probed features, in a fixed order.
    pub features: Vec<Feature>,
}

impl Report {
    /// The feature with this id, if it was probed.
    pub fn get(&self, id: &str) -> Option<&Feature> {
        self.features.iter().find(|f| f.id == id)
    }

    /// Whether the feature with this id was probed and is available.
    pub fn has(&self, id: &str) -> bool {
        self.get(id).is_some_and(|f| f.available)
    }

    /// An aligned table, one feature per line: `yes`/`no`, name, detail.
    pub fn render_text(&self) -> String {
        let width = self
            .features
            .iter()
            .map(|f| f.name.chars().count())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        let _ = writeln!(out, "kernel {}", self.kernel);
        for f in &self.features {
            let mark = if f.available { "yes" } else { "no" };
            let pad = width - f.name.chars().count();
            let _ = writeln!(
                out,
                "{mark:<3}  {}{}  {}",
                f.name,
                " ".repeat(pad),
                f.detail
            );
        }
        out
    }
}

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
            sys::BPF_MAP_TYPE_TASK_STORAGE,
            "tags",
            &ctx,
        )
    });
    run("map_sk_storage", &|| {
        probe_map_libbpf(
            "map_sk_storage",
            "BPF map type socket storage",
            sys::BPF_MAP_TYPE_SK_STORAGE,
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
            sys::BPF_MAP_TYPE_RINGBUF,
            "tags, profiler",
            &ctx,
        )
    });

    run("kprobes", &probe_kprobes);
    run("pmu_hardware", &|| probe_pmu_hardware(&ctx));
    run("perf_software", &|| probe_perf_software(&ctx));
    run("seccomp_user_notif", &probe_seccomp_user_notif);
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

/// Where cgroup v2 is mounted, from /proc/self/mounts.
///
/// Prefers `/sys/fs/cgroup` (the unified layout), then
/// `/sys/fs/cgroup/unified` (the hybrid layout), then the first cgroup2
/// mount found. `None` if cgroup v2 is not mounted at all.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    cgroup2_mount_in(&mounts)
}

fn cgroup2_mount_in(mounts: &str) -> Option<PathBuf> {
    let all: Vec<String> = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let _dev = f.next()?;
            let point = f.next()?;
            (f.next()? == "cgroup2").then(|| unescape_mount_path(point))
        })
        .collect();
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .find_map(|p| all.iter().find(|m| m == p))
        .or_else(|| all.first())
        .map(PathBuf::from)
}

/// /proc/self/mounts writes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = oct
                    .iter()
                    .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The kernel release from uname(2), e.g. `"6.18.44-fc-v657"`.
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain old data; all-zero is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    // SAFETY: uname NUL-terminates every field.
    unsafe { CStr::from_ptr(u.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// A `kernel.*` sysctl as an integer, e.g. `sysctl("perf_event_paranoid")`.
pub fn sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(Path::new("/proc/sys/kernel").join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------
// Error words

/// `EPERM (Operation not permitted)`.
fn errno_words(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        ENOTSUPP => return "ENOTSUPP (operation not supported by this kernel)".into(),
        _ => "",
    };
    let text = io::Error::from_raw_os_error(e).to_string();
    let text = text
        .strip_suffix(&format!(" (os error {e})"))
        .unwrap_or(&text)
        .to_string();
    if name.is_empty() {
        format!("errno {e} ({text})")
    } else {
        format!("{name} ({text})")
    }
}

/// The kernel-internal "not supported" errno that BPF returns to user space.
const ENOTSUPP: i32 = 524;

fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

// ---------------------------------------------------------------------------
// Capabilities

const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_RESOURCE: u32 = 24;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

#[derive(Debug, Clone, Copy)]
struct Caps {
    /// CapEff from /proc/self/status; `None` if it could not be read.
    eff: Option<u64>,
}

impl Caps {
    fn read() -> Caps {
        let eff = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| parse_cap_eff(&s));
        Caps { eff }
    }

    fn has(self, cap: u32) -> bool {
        self.eff.is_some_and(|e| e & (1u64 << cap) != 0)
    }

    /// May load every kind of BPF program (tracing ones included).
    fn bpf_tracing(self) -> bool {
        self.has(CAP_SYS_ADMIN) || (self.has(CAP_BPF) && self.has(CAP_PERFMON))
    }
}

fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

struct CapSpec {
    id: &'static str,
    bit: u32,
    name: &'static str,
    missing: &'static str,
    needed_by: &'static str,
}

const CAPS: &[CapSpec] = &[
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

fn probe_cap(c: &CapSpec, caps: Caps) -> Feature {
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

fn probe_root() -> Feature {
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

// ---------------------------------------------------------------------------
// Sysctls

struct SysctlSpec {
    id: &'static str,
    key: &'static str,
    needed_by: &'static str,
    meaning: fn(i64) -> &'static str,
}

const SYSCTLS: &[SysctlSpec] = &[
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
fn unprivileged_bpf_meaning(v: i64, code: u32) -> &'static str {
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

fn probe_sysctl(s: &SysctlSpec) -> Feature {
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

// ---------------------------------------------------------------------------
// BTF, bpffs, cgroup v2

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

fn probe_btf() -> Feature {
    use std::io::Read;
    let res = std::fs::File::open(VMLINUX_BTF).and_then(|mut f| {
        let mut magic = [0u8; 2];
        f.read_exact(&mut magic)?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        Ok((magic, len))
    });
    let (available, detail) = match res {
        // BTF magic 0xeB9F, stored in the machine's byte order.
        Ok((m, len)) if u16::from_ne_bytes(m) == 0xeb9f => (
            true,
            if len > 0 {
                format!("{VMLINUX_BTF} readable, {} KiB", len / 1024)
            } else {
                format!("{VMLINUX_BTF} readable")
            },
        ),
        Ok((m, _)) => (
            false,
            format!(
                "{VMLINUX_BTF} does not start with the BTF magic (found {:02x}{:02x})",
                m[0], m[1]
            ),
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (
            false,
            format!("{VMLINUX_BTF} missing: kernel built without CONFIG_DEBUG_INFO_BTF, so CO-RE programs cannot load"),
        ),
        Err(e) => (false, format!("{VMLINUX_BTF} not readable: {e}")),
    };
    Feature {
        id: "btf",
        name: "kernel BTF".into(),
        available,
        detail,
        needed_by: "all",
    }
}

fn probe_bpffs() -> Feature {
    let available = crate::os::is_mounted("/sys/fs/bpf", "bpf");
    let detail = if available {
        "mounted at /sys/fs/bpf".to_string()
    } else {
        let elsewhere = std::fs::read_to_string("/proc/self/mounts")
            .ok()
            .and_then(|m| {
                m.lines().find_map(|l| {
                    let mut f = l.split_whitespace();
                    let _ = f.next();
                    let p = f.next()?;
                    (f.next()? == "bpf").then(|| unescape_mount_path(p))
                })
            });
        match elsewhere {
            Some(p) => format!("not at /sys/fs/bpf (a bpffs is mounted at {p}); run `mount -t bpf bpf /sys/fs/bpf`"),
            None => "not mounted; run `mount -t bpf bpf /sys/fs/bpf` as root".to_string(),
        }
    };
    Feature {
        id: "bpffs",
        name: "bpffs at /sys/fs/bpf".into(),
        available,
        detail,
        needed_by: "all",
    }
}

fn probe_cgroup2() -> Feature {
    let (available, detail) = match cgroup2_mount() {
        None => (
            false,
            "no cgroup2 filesystem in /proc/self/mounts".to_string(),
        ),
        Some(p) => match std::fs::read_to_string(p.join("cgroup.controllers")) {
            Ok(c) if c.trim().is_empty() => (
                true,
                format!(
                    "mounted at {}; no controllers on it (they are on cgroup v1 hierarchies)",
                    p.display()
                ),
            ),
            Ok(c) => (
                true,
                format!("mounted at {}; controllers: {}", p.display(), c.trim()),
            ),
            Err(e) => (
                false,
                format!(
                    "mounted at {} but its cgroup.controllers is not readable: {e}",
                    p.display()
                ),
            ),
        },
    };
    Feature {
        id: "cgroup2",
        name: "cgroup v2".into(),
        available,
        detail,
        needed_by: "tags, executive",
    }
}

// ---------------------------------------------------------------------------
// BPF program loading

struct Ctx<'a> {
    caps: Caps,
    /// The parsed kernel BTF, or the errno libbpf failed with.
    vmlinux: Result<&'a VmlinuxBtf, i32>,
}

/// The kernel's BTF, parsed by libbpf; freed on drop.
struct VmlinuxBtf(*mut sys::btf);

impl VmlinuxBtf {
    fn load() -> Result<VmlinuxBtf, i32> {
        // SAFETY: no arguments; returns an owned btf object or NULL with errno set.
        let p = unsafe { sys::btf__load_vmlinux_btf() };
        if p.is_null() {
            return Err(last_errno());
        }
        Ok(VmlinuxBtf(p))
    }

    /// The names among `names` with no `btf_trace_<name>` typedef.
    fn missing_tracepoints<'n>(&self, names: &[&'n str]) -> Vec<&'n str> {
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
    fn find(&self, name: &str, kind: u32) -> Option<u32> {
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

fn probe_tags_tracepoints(ctx: &Ctx) -> Feature {
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
struct LoadError {
    errno: i32,
    /// The last line of the verifier log, if one was asked for and written.
    log_tail: Option<String>,
}

/// Loads `r0 = ret; exit` with the given type and attach data, then closes
/// it at once. Never attaches anything.
fn try_load(
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

/// LINUX_VERSION_CODE of the running kernel, from its release string.
fn kernel_version_code() -> u32 {
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

/// How a failed load reads in `mantle doctor`.
fn explain_load(e: &LoadError, ctx: &Ctx, ftrace_based: bool) -> String {
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
const PROG_ORDER: &[&str] = &[
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

struct PlainProg {
    id: &'static str,
    name: &'static str,
    prog_type: sys::bpf_prog_type,
    attach_type: sys::bpf_attach_type,
    ret: i32,
    needed_by: &'static str,
}

const PLAIN_PROGS: &[PlainProg] = &[
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

fn probe_plain_prog(p: &PlainProg, ctx: &Ctx) -> Feature {
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

struct BtfProg {
    id: &'static str,
    name: &'static str,
    prog_type: sys::bpf_prog_type,
    attach_type: sys::bpf_attach_type,
    /// Candidate attach targets, tried in order, with their BTF kind.
    targets: &'static [&'static str],
    kind: u32,
    /// Whether the kernel attaches it through a BPF trampoline (ftrace).
    ftrace_based: bool,
    /// What a missing target means.
    no_target: &'static str,
    needed_by: &'static str,
}

const BTF_PROGS: &[BtfProg] = &[
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

fn probe_btf_prog(p: &BtfProg, ctx: &Ctx) -> Feature {
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

fn probe_struct_ops(ctx: &Ctx) -> Feature {
    // libbpf's probe loads a struct_ops program without a target and
    // expects ENOTSUPP, which proves the type exists.
    // SAFETY: plain call; opts must be NULL.
    let r =
        unsafe { sys::libbpf_probe_bpf_prog_type(sys::BPF_PROG_TYPE_STRUCT_OPS, std::ptr::null()) };
    let (available, detail) = if r == 1 {
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

// ---------------------------------------------------------------------------
// BPF maps

fn probe_map_libbpf(
    id: &'static str,
    name: &'static str,
    map_type: sys::bpf_map_type,
    needed_by: &'static str,
    ctx: &Ctx,
) -> Feature {
    // SAFETY: plain call; opts must be NULL.
    let r = unsafe { sys::libbpf_probe_bpf_map_type(map_type, std::ptr::null()) };
    // libbpf closes its fds after the failed create; successful close(2)
    // calls leave errno alone, so this is the create's errno.
    let errno = last_errno();
    let (available, detail) = if r == 1 {
        (true, "map created".to_string())
    } else {
        // r < 0: libbpf failed before the create (e.g. loading the BTF that
        // storage maps need), with -r as the errno.
        let (e, what) = if r < 0 {
            (-r, "refused while preparing the map")
        } else {
            (errno, "refused at creation")
        };
        let mut d = format!("{what}: {}", errno_words(e));
        if e == libc::EPERM && !ctx.caps.has(CAP_BPF) && !ctx.caps.has(CAP_SYS_ADMIN) {
            d.push_str(" — needs root or CAP_BPF");
        } else if r == 0 && (e == libc::EINVAL || e == ENOTSUPP) {
            d.push_str(" — this kernel does not know this map type");
        }
        (false, d)
    };
    Feature {
        id,
        name: name.into(),
        available,
        detail,
        needed_by,
    }
}

fn probe_mmapable_array(ctx: &Ctx) -> Feature {
    let feature = |available, detail| Feature {
        id: "map_mmapable_array",
        name: "BPF mmapable array (BPF_F_MMAPABLE)".into(),
        available,
        detail,
        needed_by: "tags",
    };
    let opts = sys::bpf_map_create_opts {
        sz: std::mem::size_of::<sys::bpf_map_create_opts>() as _,
        map_flags: sys::BPF_F_MMAPABLE,
        ..Default::default()
    };
    // SAFETY: opts is a valid, sized options struct; the name may be NULL.
    let fd =
        unsafe { sys::bpf_map_create(sys::BPF_MAP_TYPE_ARRAY, std::ptr::null(), 4, 8, 1, &opts) };
    if fd < 0 {
        let mut d = format!("refused at creation: {}", errno_words(-fd));
        if -fd == libc::EPERM && !ctx.caps.has(CAP_BPF) && !ctx.caps.has(CAP_SYS_ADMIN) {
            d.push_str(" — needs root or CAP_BPF");
        } else if -fd == libc::EINVAL {
            d.push_str(" — this kernel does not accept BPF_F_MMAPABLE (needs Linux 5.5)");
        }
        return feature(false, d);
    }
    // SAFETY: fd is a new map fd that nothing else owns.
    let map = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    // SAFETY: a fresh shared mapping of the map's one page; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            map.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return feature(
            false,
            format!(
                "map created but mmap refused: {}",
                errno_words(last_errno())
            ),
        );
    }
    const MAGIC: u64 = 0x6d61_6e74_6c65_0001;
    // SAFETY: p points to at least 8 writable, page-aligned bytes (element 0).
    unsafe { std::ptr::write_volatile(p.cast::<u64>(), MAGIC) };
    let key = 0u32;
    let mut val = 0u64;
    // SAFETY: key and val are valid for the map's key and value sizes.
    let r = unsafe {
        sys::bpf_map_lookup_elem(
            map.as_raw_fd(),
            (&key as *const u32).cast(),
            (&mut val as *mut u64).cast(),
        )
    };
    // SAFETY: p/page is exactly the mapping made above.
    unsafe { libc::munmap(p, page) };
    match (r, val) {
        (0, MAGIC) => feature(
            true,
            "created, written through mmap and read back with a lookup".into(),
        ),
        (0, v) => feature(
            false,
            format!("mmap'd write not seen by lookup (read {v:#x})"),
        ),
        (e, _) => feature(false, format!("lookup failed: {}", errno_words(-e))),
    }
}

// ---------------------------------------------------------------------------
// perf events

/// `struct perf_event_attr` up to and including `config3` (Linux 6.3, 136
/// bytes). Older kernels accept it as long as the fields they do not know
/// are zero.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    rest: [u64; 8],
}

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;

/// Opens (disabled) and closes at once a perf event. Ok(()) or the errno.
fn perf_open(mut attr: PerfEventAttr, pid: i32, cpu: i32) -> Result<(), i32> {
    attr.size = std::mem::size_of::<PerfEventAttr>() as u32;
    attr.flags |= ATTR_DISABLED;
    // SAFETY: attr is a valid, fully initialised perf_event_attr of `size`
    // bytes; any pointer in config1 is kept alive by the caller.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: fd is a new perf event fd that nothing else owns.
    drop(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    Ok(())
}

fn perf_denied(e: i32, ctx: &Ctx) -> String {
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

fn probe_pmu_hardware(ctx: &Ctx) -> Feature {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_HARDWARE,
        config: PERF_COUNT_HW_CPU_CYCLES,
        flags: ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV,
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

fn probe_perf_software(ctx: &Ctx) -> Feature {
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
            match perf_open(attr(ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV), 0, -1) {
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
fn tracefs_file(name: &str) -> Option<PathBuf> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

fn probe_kprobes() -> Feature {
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

// ---------------------------------------------------------------------------
// seccomp user notification and Syscall User Dispatch, in forked children

/// Runs `f` in a forked child and returns its exit code.
///
/// `f` runs after fork(2) in a possibly multi-threaded process, so it must
/// only make system calls: no allocation, no locks.
fn in_child(f: fn() -> i32) -> Result<i32, String> {
    // SAFETY: the child only runs `f` (system calls only) and then _exit,
    // so nothing that fork() leaves in an inconsistent state is touched.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork failed: {}", errno_words(last_errno())));
    }
    if pid == 0 {
        let code = std::panic::catch_unwind(f).unwrap_or(127);
        // SAFETY: ends the child without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; status is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let e = last_errno();
        if e != libc::EINTR {
            return Err(format!("waitpid failed: {}", errno_words(e)));
        }
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Err(format!(
            "probe child killed by signal {}",
            libc::WTERMSIG(status)
        ))
    } else {
        Err(format!("probe child ended oddly (status {status:#x})"))
    }
}

/// Child side of the seccomp probe: 0 on success, else the errno (+100 for
/// the no_new_privs step, which never fails on sane kernels).
fn seccomp_listener_child() -> i32 {
    let filter = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return 100 + last_errno().min(100);
    }
    // SAFETY: prog points to a valid filter program that outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        last_errno().clamp(1, 99)
    } else {
        0
    }
}

fn probe_seccomp_user_notif() -> Feature {
    let (available, detail) = match in_child(seccomp_listener_child) {
        Ok(0) => (
            true,
            "filter with a listener installed in a child (SECCOMP_FILTER_FLAG_NEW_LISTENER)".into(),
        ),
        Ok(c) if c > 100 => (
            false,
            format!("PR_SET_NO_NEW_PRIVS refused: {}", errno_words(c - 100)),
        ),
        Ok(libc::EINVAL) => (
            false,
            format!(
                "seccomp refused the listener flag: {} — needs Linux 5.0 with CONFIG_SECCOMP_FILTER",
                errno_words(libc::EINVAL)
            ),
        ),
        Ok(c) => (false, format!("seccomp refused: {}", errno_words(c))),
        Err(e) => (false, e),
    };
    Feature {
        id: "seccomp_user_notif",
        name: "seccomp user notification".into(),
        available,
        detail,
        needed_by: "executive",
    }
}

const PR_SET_SYSCALL_USER_DISPATCH: libc::c_int = 59;
const PR_SYS_DISPATCH_OFF: libc::c_ulong = 0;
const PR_SYS_DISPATCH_ON: libc::c_ulong = 1;
const SYSCALL_DISPATCH_FILTER_ALLOW: u8 = 0;

/// Child side of the SUD probe: 0 on success, else the errno (+100 if
/// turning it off again failed).
fn sud_child() -> i32 {
    let selector = SYSCALL_DISPATCH_FILTER_ALLOW;
    // SAFETY: the selector byte lives until SUD is turned off below (and the
    // child exits right after); with ALLOW no system call is diverted.
    let r = unsafe {
        libc::prctl(
            PR_SET_SYSCALL_USER_DISPATCH,
            PR_SYS_DISPATCH_ON,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            &selector as *const u8,
        )
    };
    if r != 0 {
        return last_errno().clamp(1, 99);
    }
    // SAFETY: integer arguments only.
    let r = unsafe { libc::prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0) };
    if r != 0 {
        return 100 + last_errno().clamp(1, 99);
    }
    0
}

fn probe_syscall_user_dispatch() -> Feature {
    let (available, detail) = match in_child(sud_child) {
        Ok(0) => (true, "turned on and off again in a child".into()),
        Ok(c) if c > 100 => (
            false,
            format!(
                "turned on, but turning it off failed: {}",
                errno_words(c - 100)
            ),
        ),
        Ok(libc::EINVAL) => (
            false,
            format!(
                "prctl refused: {} — needs Linux 5.11 with generic entry code (x86-64 has it)",
                errno_words(libc::EINVAL)
            ),
        ),
        Ok(c) => (false, format!("prctl refused: {}", errno_words(c))),
        Err(e) => (false, e),
    };
    Feature {
        id: "syscall_user_dispatch",
        name: "Syscall User Dispatch".into(),
        available,
        detail,
        needed_by: "executive",
    }
}

// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::sync::Mutex;

    /// The tests count file descriptors and fork: run them one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a root-only test may run. Not root: skip with a reason,
    /// unless CI is set, where the test must fail instead.
    fn root_or_skip(test: &str) -> bool {
        if crate::os::geteuid() == 0 {
            return true;
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "{test} needs root and CI is set: failing instead of skipping"
        );
        eprintln!(
            "SKIP {test}: needs root (effective uid {})",
            crate::os::geteuid()
        );
        false
    }

    const ALL_IDS: &[&str] = &[
        "btf",
        "bpffs",
        "cgroup2",
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
        "map_task_storage",
        "map_sk_storage",
        "map_mmapable_array",
        "tracepoints_tags",
        "map_ringbuf",
        "kprobes",
        "pmu_hardware",
        "perf_software",
        "seccomp_user_notif",
        "syscall_user_dispatch",
        "root",
        "cap_bpf",
        "cap_perfmon",
        "cap_sys_admin",
        "cap_sys_resource",
        "sysctl_unprivileged_bpf_disabled",
        "sysctl_perf_event_paranoid",
        "sysctl_perf_event_max_sample_rate",
    ];

    #[test]
    fn every_id_once_and_rendered() {
        let _g = serial();
        let r = probe_all();
        let ids: Vec<&str> = r.features.iter().map(|f| f.id).collect();
        assert_eq!(ids, ALL_IDS, "ids or their order changed");
        let text = r.render_text();
        println!("{text}");
        assert!(text.contains(&r.kernel));
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(lines.len(), r.features.len(), "one line per feature");
        let mut cols = Vec::new();
        for (f, line) in r.features.iter().zip(&lines) {
            assert!(!f.detail.is_empty(), "{} has no detail", f.id);
            assert!(!f.needed_by.is_empty(), "{} has no needed_by", f.id);
            let mark = if f.available { "yes  " } else { "no   " };
            assert!(
                line.strip_prefix(mark)
                    .is_some_and(|rest| rest.starts_with(&f.name)),
                "{}: expected {mark:?} then {:?}, got {line:?}",
                f.id,
                f.name
            );
            assert!(line.ends_with(&f.detail), "{}: detail not at the end", f.id);
            cols.push(line.len() - f.detail.len());
        }
        // Aligned: every detail starts in the same column.
        assert!(
            cols.windows(2).all(|w| w[0] == w[1]),
            "not aligned: {cols:?}"
        );
    }

    #[test]
    fn get_finds_and_misses() {
        let r = Report {
            kernel: "x".into(),
            features: vec![Feature {
                id: "btf",
                name: "kernel BTF".into(),
                available: true,
                detail: "d".into(),
                needed_by: "all",
            }],
        };
        assert_eq!(r.get("btf").map(|f| f.available), Some(true));
        assert!(r.has("btf"));
        assert!(r.get("nope").is_none());
        assert!(!r.has("nope"));
    }

    #[test]
    fn json_field_names() {
        let _g = serial();
        let v = serde_json::to_value(probe_all()).unwrap();
        assert!(v["kernel"].is_string());
        let f = &v["features"][0];
        for k in ["id", "name", "available", "detail", "needed_by"] {
            assert!(f.get(k).is_some(), "missing JSON field {k}");
        }
        assert_eq!(f["id"], "btf");
    }

    #[test]
    fn btf_iff_vmlinux_exists() {
        let _g = serial();
        let r = probe_all();
        assert_eq!(
            r.get("btf").unwrap().available,
            Path::new(VMLINUX_BTF).exists()
        );
    }

    #[test]
    fn missing_tracepoints_names_exactly_the_missing_ones() {
        let _g = serial();
        match VmlinuxBtf::load() {
            Ok(btf) => assert_eq!(
                btf.missing_tracepoints(&["sched_process_fork", "mantle_no_such_tracepoint"]),
                vec!["mantle_no_such_tracepoint"]
            ),
            // no kernel BTF here: only acceptable where btf is not there
            Err(_) => assert!(!Path::new(VMLINUX_BTF).exists()),
        }
    }

    #[test]
    fn fast_and_leaves_no_fds() {
        let _g = serial();
        let count = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let _ = probe_all(); // warm-up: libbpf's one-time state
        let before = count();
        let t = std::time::Instant::now();
        let r = probe_all();
        let took = t.elapsed();
        assert_eq!(count(), before, "probe_all leaked file descriptors");
        assert!(
            took < std::time::Duration::from_millis(1000),
            "took {took:?}"
        );
        println!("probe_all took {took:?} for {} features", r.features.len());
    }

    #[test]
    fn root_and_caps_agree_with_status() {
        let _g = serial();
        let r = probe_all();
        assert_eq!(r.get("root").unwrap().available, crate::os::geteuid() == 0);
        // Read CapEff differently: via the capget system call (the probes
        // parse /proc/self/status).
        let eff = crate::os::effective_caps().expect("capget");
        for (id, bit) in [
            ("cap_bpf", 39),
            ("cap_perfmon", 38),
            ("cap_sys_admin", 21),
            ("cap_sys_resource", 24),
        ] {
            assert_eq!(r.get(id).unwrap().available, eff & (1 << bit) != 0, "{id}");
        }
    }

    #[test]
    fn cgroup2_mount_is_a_cgroup2_fs() {
        let _g = serial();
        match cgroup2_mount() {
            Some(p) => {
                let c = CString::new(p.to_str().unwrap()).unwrap();
                // SAFETY: statfs is plain old data; c is NUL-terminated.
                let mut s: libc::statfs = unsafe { std::mem::zeroed() };
                assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut s) }, 0);
                #[allow(clippy::unnecessary_cast)] // c_long here, c_uint elsewhere
                let magic = libc::CGROUP2_SUPER_MAGIC as i64;
                assert_eq!(s.f_type as i64, magic, "{p:?}");
            }
            None => assert!(!std::fs::read_to_string("/proc/self/mounts")
                .unwrap()
                .contains(" cgroup2 ")),
        }
    }

    #[test]
    fn cgroup2_mount_parsing() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            cgroup2_mount_in(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let unified =
            "cgroup2 /run/x\\040y cgroup2 rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n";
        assert_eq!(
            cgroup2_mount_in(unified),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        let odd = "cgroup2 /run/x\\040y cgroup2 rw 0 0\n";
        assert_eq!(cgroup2_mount_in(odd), Some(PathBuf::from("/run/x y")));
        assert_eq!(cgroup2_mount_in("proc /proc proc rw 0 0\n"), None);
        assert_eq!(unescape_mount_path("a\\134b\\"), "a\\b\\");
    }

    #[test]
    fn errno_words_are_plain() {
        assert_eq!(errno_words(libc::EPERM), "EPERM (Operation not permitted)");
        assert!(errno_words(ENOTSUPP).starts_with("ENOTSUPP"));
        assert!(errno_words(4000).starts_with("errno 4000"));
    }

    #[test]
    fn seccomp_agrees_with_action_avail() {
        let _g = serial();
        let r = probe_all();
        // Ask the kernel differently: is the USER_NOTIF action available?
        let action: u32 = libc::SECCOMP_RET_USER_NOTIF;
        // SAFETY: the action pointer is valid for the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_GET_ACTION_AVAIL,
                0,
                &action as *const u32,
            )
        };
        let direct = rc == 0;
        if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail") {
            assert_eq!(direct, s.split_whitespace().any(|a| a == "user_notif"));
        }
        assert_eq!(
            r.get("seccomp_user_notif").unwrap().available,
            direct,
            "{}",
            r.get("seccomp_user_notif").unwrap().detail
        );
    }

    static SUD_SELECTOR: AtomicU8 = AtomicU8::new(0);
    static SUD_TRAPPED: AtomicU8 = AtomicU8::new(0);

    extern "C" fn on_sigsys(_: libc::c_int) {
        SUD_TRAPPED.store(1, Ordering::SeqCst);
        // SYSCALL_DISPATCH_FILTER_ALLOW, so that rt_sigreturn goes through.
        SUD_SELECTOR.store(0, Ordering::SeqCst);
    }

    /// Really diverts a system call with SUD: 0 if the SIGSYS arrived.
    fn sud_divert_child() -> i32 {
        // SAFETY: sigaction is plain old data; zeroed is a valid value.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_sigsys as *const () as usize;
        // SAFETY: installs a handler that only touches atomics.
        if unsafe { libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) } != 0 {
            return 10;
        }
        // SAFETY: the selector is a static, so it outlives the dispatch.
        let r = unsafe {
            libc::prctl(
                59,                 // PR_SET_SYSCALL_USER_DISPATCH, spelled out on purpose
                1 as libc::c_ulong, // PR_SYS_DISPATCH_ON
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                SUD_SELECTOR.as_ptr(),
            )
        };
        if r != 0 {
            return 11;
        }
        // SYSCALL_DISPATCH_FILTER_BLOCK: from here on system calls trap.
        SUD_SELECTOR.store(1, Ordering::SeqCst);
        // SAFETY: getppid has no arguments; here it is diverted to SIGSYS.
        unsafe { libc::syscall(libc::SYS_getppid) };
        if SUD_TRAPPED.load(Ordering::SeqCst) == 1 {
            0
        } else {
            12
        }
    }

    #[test]
    fn sud_agrees_with_a_real_diversion() {
        let _g = serial();
        let r = probe_all();
        let direct = in_child(sud_divert_child);
        assert_eq!(
            r.get("syscall_user_dispatch").unwrap().available,
            direct == Ok(0),
            "probe: {}; direct check: {direct:?}",
            r.get("syscall_user_dispatch").unwrap().detail
        );
    }

    /// The plain program types, by libbpf's own probe instead of our load.
    #[test]
    fn plain_prog_types_agree_with_libbpf_probe() {
        let _g = serial();
        if !root_or_skip("plain_prog_types_agree_with_libbpf_probe") {
            return;
        }
        let r = probe_all();
        for (id, ty) in [
            ("prog_tracepoint", sys::BPF_PROG_TYPE_TRACEPOINT),
            ("prog_raw_tp", sys::BPF_PROG_TYPE_RAW_TRACEPOINT),
            ("prog_perf_event", sys::BPF_PROG_TYPE_PERF_EVENT),
            ("prog_sockops", sys::BPF_PROG_TYPE_SOCK_OPS),
            ("prog_cgroup_skb", sys::BPF_PROG_TYPE_CGROUP_SKB),
            ("prog_cgroup_connect4", sys::BPF_PROG_TYPE_CGROUP_SOCK_ADDR),
        ] {
            // SAFETY: plain call; opts must be NULL.
            let lib = unsafe { sys::libbpf_probe_bpf_prog_type(ty, std::ptr::null()) } == 1;
            assert_eq!(
                r.get(id).unwrap().available,
                lib,
                "{id}: {}",
                r.get(id).unwrap().detail
            );
        }
    }

    /// As root, the things every mantle machine needs must be there, and
    /// a refused program must say why in words.
    #[test]
    fn root_sees_the_basics() {
        let _g = serial();
        if !root_or_skip("root_sees_the_basics") {
            return;
        }
        let r = probe_all();
        for id in [
            "prog_tracepoint",
            "prog_raw_tp",
            "map_mmapable_array",
            "perf_software",
        ] {
            assert!(r.has(id), "{id}: {}", r.get(id).unwrap().detail);
        }
        for f in r
            .features
            .iter()
            .filter(|f| f.id.starts_with("prog_") && !f.available)
        {
            assert!(
                f.detail.contains('(') && f.detail.contains(')'),
                "{}: errno not in words: {}",
                f.id,
                f.detail
            );
        }
    }

    #[test]
    fn unprivileged_bpf_meaning_follows_the_kernel() {
        let v6_4 = 6 << 16 | 4 << 8;
        let v6_5 = 6 << 16 | 5 << 8;
        assert!(unprivileged_bpf_meaning(2, v6_4).contains("may use bpf(2)"));
        for v in [1, 2] {
            let m = unprivileged_bpf_meaning(v, v6_5);
            assert!(!m.contains("bpf(2)"), "{m}");
            assert!(m.contains("create maps and load programs"), "{m}");
            assert!(m.contains("pinned objects"), "{m}");
        }
    }

    #[test]
    fn kernel_version_code_matches_release() {
        let code = kernel_version_code();
        let rel = kernel_release();
        let major = rel.split('.').next().unwrap().parse::<u32>().unwrap();
        assert_eq!(code >> 16, major);
    }
}
