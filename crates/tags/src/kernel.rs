//! The kernel side as tools and applications reach it after loading:
//! through its pins. Opening the public maps (read-only mappings), the
//! root-only maps and programs, running the `mt_admin`/`mt_arm_expiry`
//! syscall programs and the iterators, attaching the hooks that exist only
//! while tags do, and the table lock. Loading itself is `crate::loader`
//! (feature `loader`), re-exported here as `up`/`down`.
//!
//! Every system call goes through `mantle_sys` (bpf, lock, netns): this
//! crate has no `unsafe`. Errors keep their cause: a failing call becomes
//! [`Error::Kernel`] with the io/libbpf error as its source, except where
//! the errno has a meaning of its own here (EACCES/EPERM on a root-only
//! pin: [`Error::Permission`]; ENOENT while nothing is loaded:
//! [`Error::NotLoaded`]).
//!
//! Pin layout under /sys/fs/bpf/mantle/tags:
//! ```text
//! maps/<name>   every map (view, ctl, tags world-readable; others root)
//! progs/<name>  every program (the directory is root's alone)
//! links/<name>  attached hooks; "always" links exist while loaded, the
//!               "tagged" ones only while at least one tag exists.
//! ```

use crate::abi::MT_COMM_LEN;
use crate::Error;
use libbpf_rs::libbpf_sys;
pub use mantle_sys::bpf::{MappedMap, PinnedMap};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use zerocopy::{FromBytes, IntoBytes};

#[cfg(feature = "loader")]
pub use crate::loader::{down, up, UpOpts, UpReport, REQUIRED};

pub use mantle_abi::paths::{LIB_NOTE, PIN_PARENT, PIN_ROOT};

/// The libmantle.so the loaded kernel side watches.
pub fn ctl_lib() -> Option<PathBuf> {
    std::fs::read_to_string(LIB_NOTE)
        .ok()
        .map(|s| PathBuf::from(s.trim()))
}

/// Maps, and whether users other than root may read them.
pub const MAPS: &[(&str, bool)] = &[
    ("view", true),
    ("ctl", true),
    ("tags", true),
    ("stats", true),
    ("threads", false),
    ("owners", false),
    ("lifeline", false),
    ("sk_dep", false),
    ("sk_role", false),
    ("expiry", false),
    ("sk_rdep", false),
    ("chan_dep", false),
    ("op", false),
    ("zero_dep", false),
    ("sk_owner", false),
    ("chan_hint", false),
    ("dl_events", false),
];

/// Hooks attached only while tags exist: (program, how to attach).
pub const TAGGED_HOOKS: &[(&str, Hook)] = &[
    ("mt_fork", Hook::RawTp),
    ("mt_exit", Hook::RawTp),
    ("mt_signal", Hook::RawTp),
    ("mt_sigdeliver", Hook::RawTp),
    ("mt_sock_send", Hook::RawTp),
    ("mt_unix_queued", Hook::RawTp),
    ("mt_sock_recv", Hook::RawTp),
    ("mt_sys_exit", Hook::RawTp),
    ("mt_tcp_sendmsg", Hook::RawTp),
    (
        "mt_sendmsg4",
        Hook::Cgroup(libbpf_sys::BPF_CGROUP_UDP4_SENDMSG),
    ),
    (
        "mt_sendmsg6",
        Hook::Cgroup(libbpf_sys::BPF_CGROUP_UDP6_SENDMSG),
    ),
];

#[derive(Clone, Copy, Debug)]
pub enum Hook {
    RawTp,
    Cgroup(libbpf_sys::bpf_attach_type),
}

pub fn pin(kind: &str, name: &str) -> PathBuf {
    pin_at(Path::new(PIN_ROOT), kind, name)
}

pub(crate) fn pin_at(root: &Path, kind: &str, name: &str) -> PathBuf {
    root.join(kind).join(name)
}

/// Whether a complete kernel side is pinned. `up` builds it in a staging
/// directory and renames that to PIN_ROOT as its last step, so a pinned
/// `ctl` means every pin is there (issue 8: a `tags up` killed half-way
/// left a side that looked loaded).
pub fn loaded() -> bool {
    pin("maps", "ctl").exists()
}

// The pin directories mantle trusts: made by root, writable by root only,
// not symbolic links. bpffs is often mounted 1777, so anybody may create
// `/sys/fs/bpf/mantle` before root does and then rename or replace what
// root pins in it (issue 8).

/// Checks that every existing pin directory is root's; `Err` names the
/// first that is not.
pub fn check_pin_dirs() -> Result<(), Error> {
    let mut dirs = vec![PathBuf::from(PIN_PARENT), PathBuf::from(PIN_ROOT)];
    for d in ["maps", "progs", "links"] {
        dirs.push(Path::new(PIN_ROOT).join(d));
    }
    for d in dirs {
        safe_dir(&d)?;
    }
    Ok(())
}

/// `Ok` if `d` does not exist, or is a directory (not a link) owned by root
/// that nobody else may write.
pub(crate) fn safe_dir(d: &Path) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let m = match std::fs::symlink_metadata(d) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(kerr(format!("inspect {}", d.display()), e)),
    };
    // Root as this process sees it: in a user namespace that does not map
    // uid 0, root's files show the overflow uid, and the namespace's own
    // uid 0 (perhaps nobody outside) is not root. `/` is root's.
    let root_uid = std::fs::metadata("/").map(|r| r.uid()).unwrap_or(0);
    if !m.file_type().is_dir() || m.uid() != root_uid || m.mode() & 0o022 != 0 {
        return Err(Error::Refused(format!(
            "{} is not a directory that only root can change (owner uid {}, mode {:o}): \
             mantle did not make it and will not use it; remove it (`rm -r {}`) and retry",
            d.display(),
            m.uid(),
            m.mode() & 0o7777,
            d.display()
        )));
    }
    Ok(())
}

/// Creates `d` (root's, `mode`) or checks an existing one with `safe_dir`.
pub(crate) fn make_safe_dir(d: &Path, mode: u32) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(mode).create(d) {
        Ok(()) => {
            // the umask may have taken bits away: say exactly what we mean
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode))
                .map_err(|e| kerr(format!("chmod {}", d.display()), e))?;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => safe_dir(d),
        Err(e) => Err(kerr(format!("create {}", d.display()), e)),
    }
}

/// A failing system call while doing `what`, its error kept as the source.
pub(crate) fn kerr(
    what: impl Into<String>,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    Error::Kernel {
        what: what.into(),
        source: e.into(),
    }
}

/// An error opening pin `what`: permission and "not loaded" have meanings
/// of their own; the rest keeps its cause.
fn pin_err(what: String, root_only: &str, e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::PermissionDenied => Error::Permission(root_only.to_string()),
        io::ErrorKind::NotFound if !loaded() => Error::NotLoaded,
        _ => kerr(what, e),
    }
}

/// Where cgroup programs attach: the cgroup v2 root.
pub fn cgroup_root() -> Result<PathBuf, Error> {
    mantle_sys::probe::cgroup2_mount().ok_or_else(|| {
        Error::Missing("cgroup v2 is not mounted (needed for connect/sendmsg hooks)".into())
    })
}

/// Whether the tagged hooks are attached.
pub fn hooks_attached() -> bool {
    pin("links", TAGGED_HOOKS[0].0).exists()
}

/// Attaches (and pins) the hooks needed while tags exist. Idempotent.
pub fn attach_tagged() -> Result<(), Error> {
    let mut cgf = None;
    let opts = ctl_now()?.opts;
    for (name, hook) in TAGGED_HOOKS {
        let lp = pin("links", name);
        if lp.exists() || (*name == "mt_sys_exit" && opts & crate::abi::OPT_NO_FD_CHANNELS != 0) {
            continue;
        }
        let prog = mantle_sys::bpf::obj_get(&pin("progs", name), true)
            .map_err(|e| kerr(format!("open pinned program {name}"), e))?;
        let link = match hook {
            Hook::RawTp => mantle_sys::bpf::raw_tracepoint_open(prog.as_fd()),
            Hook::Cgroup(at) => {
                if cgf.is_none() {
                    let cg = cgroup_root()?;
                    cgf = Some(std::fs::File::open(&cg).map_err(|e| kerr("open cgroup", e))?);
                }
                let cg = cgf.as_ref().expect("opened above");
                mantle_sys::bpf::link_create(prog.as_fd(), cg.as_fd(), *at)
            }
        }
        .map_err(|e| kerr(format!("attach {name}"), e))?;
        mantle_sys::bpf::obj_pin(link.as_fd(), &lp)
            .map_err(|e| kerr(format!("pin link {name}"), e))?;
    }
    Ok(())
}

/// Arms the expiry timer of tag `bit`: it is retired `ms` from now.
pub fn arm_expiry(bit: u32, ms: u32) -> Result<(), Error> {
    let mut args = crate::abi::ExpireArgs { tag: bit, ms };
    run_syscall_prog("mt_arm_expiry", &mut args, "arming an expiry")
}

/// Root's one way to change the frozen table (`mt_admin`, tags.bpf.c).
pub fn admin(a: &crate::abi::Admin) -> Result<(), Error> {
    let mut a = *a;
    run_syscall_prog("mt_admin", &mut a, "changing the tag table")
}

/// The parameters of the next operation of the op iterator (the frozen
/// `op` map), written by the `mt_set_op` program.
pub fn set_op(o: &crate::abi::Op) -> Result<(), Error> {
    let mut o = *o;
    run_syscall_prog("mt_set_op", &mut o, "changing another thread's tags")
}

/// Runs pinned syscall program `name` once on `ctx` (BPF_PROG_RUN); its
/// return value is 0 or a negative MT_E* error. The pin is root's: others
/// get `Permission` naming `what`.
fn run_syscall_prog<T: FromBytes + IntoBytes>(
    name: &str,
    ctx: &mut T,
    what: &str,
) -> Result<(), Error> {
    let prog = mantle_sys::bpf::obj_get(&pin("progs", name), true).map_err(|e| {
        pin_err(
            format!("open pinned program {name}"),
            &format!("{what} needs root"),
            e,
        )
    })?;
    match mantle_sys::bpf::prog_run(prog.as_fd(), ctx)
        .map_err(|e| kerr(format!("run {name}"), e))?
    {
        0 => Ok(()),
        e => Err(crate::op_error(-e, "")),
    }
}

/// Detaches the tagged hooks (unpinning drops the last reference).
pub fn detach_tagged() -> Result<(), Error> {
    for (name, _) in TAGGED_HOOKS {
        match std::fs::remove_file(pin("links", name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(kerr(format!("unpin link {name}"), e))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Runs a pinned task iterator and returns its output records. A pinned
/// iterator link reads like a file: each read(2) runs the program over all
/// tasks, and the pin's file mode decides who may run it.
pub fn run_iter<T: FromBytes>(link: &str) -> Result<Vec<T>, Error> {
    if !loaded() {
        return Err(Error::NotLoaded);
    }
    mantle_sys::bpf::read_iter(&pin("links", link)).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidData => stale(link, &e.to_string()),
        _ => pin_err(
            format!("run iterator {link}"),
            &format!("running the {link} iterator needs root"),
            e,
        ),
    })
}

/// Opens pinned map `name` (read-only unless `write`).
pub fn pinned_map(name: &str, write: bool) -> Result<PinnedMap, Error> {
    if !loaded() {
        return Err(Error::NotLoaded);
    }
    PinnedMap::open(&pin("maps", name), write).map_err(|e| {
        pin_err(
            format!("open pinned map {name}"),
            &format!("map {name} is readable by root only"),
            e,
        )
    })
}

/// Maps pinned array `name` whose entries are `T`s, read-only (or for
/// writing, where root's pin allows it).
pub fn map_array<T>(name: &str, write: bool) -> Result<MappedMap, Error> {
    if !loaded() {
        return Err(Error::NotLoaded);
    }
    MappedMap::open(&pin("maps", name), std::mem::size_of::<T>(), write).map_err(|e| {
        match e.kind() {
            io::ErrorKind::InvalidData => stale(name, &e.to_string()),
            _ => pin_err(
                format!("map {name}"),
                &format!("map {name} is readable by root only"),
                e,
            ),
        }
    })
}

/// The control block as it is now (one volatile copy).
pub fn ctl_now() -> Result<crate::abi::Ctl, Error> {
    map_array::<crate::abi::Ctl>("ctl", false)?
        .get(0)
        .ok_or_else(|| Error::Corrupt("map ctl has no entry".into()))
}

/// The pins outlive the binary that made them: a kernel side loaded by
/// another build of mantle may lay its structs out differently.
fn stale(name: &str, detail: &str) -> Error {
    Error::Refused(format!(
        "the loaded tags kernel side comes from another build of mantle ({name}: {detail}); \
         reload it: `mantle tags down && mantle tags up`"
    ))
}

/// An exclusive lock serialising table changes between tools.
///
/// The lock file lives in a root-only directory: `flock` needs no write
/// access, so a lock file that anybody can open read-only is a lock that
/// anybody can hold forever (issue 8, item 3). Root commands wait for it a
/// bounded time and then name the holder.
pub struct TableLock(#[allow(dead_code)] std::fs::File);

/// Root-only home of the table lock.
pub use mantle_abi::paths::{LOCK_DIR, RUN_DIR, TAGS_LOCK as LOCK_FILE};

/// How long a root command waits for another to release the table lock
/// (`MANTLE_LOCK_TIMEOUT_MS` overrides it, for tests).
fn lock_timeout() -> std::time::Duration {
    let ms = std::env::var("MANTLE_LOCK_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    std::time::Duration::from_millis(ms)
}

impl TableLock {
    pub fn take() -> Result<TableLock, Error> {
        use std::os::unix::fs::OpenOptionsExt;
        make_safe_dir(Path::new(RUN_DIR), 0o755)?;
        make_safe_dir(Path::new(LOCK_DIR), 0o700)?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(LOCK_FILE)
            .map_err(|e| kerr(format!("open {LOCK_FILE}"), e))?;
        if mantle_sys::lock::lock_exclusive(&f, lock_timeout())
            .map_err(|e| kerr("lock the tag table", e))?
        {
            return Ok(TableLock(f));
        }
        let holder = mantle_sys::lock::holder(&f)
            .map(|p| format!(" by pid {p}"))
            .unwrap_or_default();
        Err(Error::Busy(format!(
            "the tag table is locked{holder} (another mantle command) and was not \
             released within {} ms",
            lock_timeout().as_millis()
        )))
    }
}

/// comm of a thread record, as text.
pub fn comm(b: &[u8; MT_COMM_LEN]) -> String {
    crate::abi::cstr(b)
}

/// Names of hosts this machine knows: itself, and its named network
/// namespaces (/run/netns/NAME, as `ip netns` makes them), by host id.
pub fn host_names(machine: u32, home: u64) -> std::collections::BTreeMap<u32, String> {
    let mut m = std::collections::BTreeMap::new();
    m.insert(machine, mantle_sys::os::hostname());
    if let Ok(rd) = std::fs::read_dir("/run/netns") {
        for e in rd.flatten() {
            if let Ok(cookie) = mantle_sys::netns::cookie_of(&e.path()) {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = crate::model::netns_host_id(machine, home, cookie);
                m.entry(id).or_insert(name);
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The refusal of a directory anybody may change reads as one sentence
    /// (issue 32: a run of stray spaces came from a continued string).
    #[test]
    fn squatted_pin_directory_refusal_has_no_stray_spaces() {
        let d = std::env::temp_dir().join(format!("mantle-safe-dir-{}", std::process::id()));
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let r = safe_dir(&d);
        std::fs::remove_dir(&d).unwrap();
        let msg = r
            .expect_err("a world-writable directory was accepted")
            .to_string();
        assert!(msg.contains("mode 777"), "{msg}");
        assert!(!msg.contains("  "), "stray spaces: {msg:?}");
    }
}
