//! Loading, pinning and attaching the kernel side, and the raw access to
//! its maps (bpf(2) through libbpf, mmap). This is the tags crate's `sys`
//! module: every `unsafe` block of the crate is here.
//!
//! Pin layout under /sys/fs/bpf/mantle/tags:
//!   maps/<name>   every map (view, ctl, tags world-readable; others root)
//!   progs/<name>  every program
//!   links/<name>  attached hooks; "always" links exist while loaded, the
//!                 "tagged" ones only while at least one tag exists.

use crate::abi::{Pod, MT_COMM_LEN};
use crate::Error;
use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use std::ffi::CString;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

mod skel {
    include!(concat!(env!("OUT_DIR"), "/tags.skel.rs"));
}
use skel::TagsSkelBuilder;

pub const PIN_ROOT: &str = "/sys/fs/bpf/mantle/tags";
/// Which libmantle.so carries the self-operation uprobe (bpffs holds no
/// regular files, so this note lives in /run).
pub const LIB_NOTE: &str = "/run/mantle/tags.lib";

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
    ("sk_net", false),
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

fn pin_at(root: &Path, kind: &str, name: &str) -> PathBuf {
    root.join(kind).join(name)
}

/// Whether a complete kernel side is pinned. `up` builds it in a staging
/// directory and renames that to PIN_ROOT as its last step, so a pinned
/// `ctl` means every pin is there (issue 8: a `tags up` killed half-way
/// left a side that looked loaded).
pub fn loaded() -> bool {
    pin("maps", "ctl").exists()
}

/// The pin directories mantle trusts: made by root, writable by root only,
/// not symbolic links. bpffs is often mounted 1777, so anybody may create
/// `/sys/fs/bpf/mantle` before root does and then rename or replace what
/// root pins in it (issue 8).
const PIN_PARENT: &str = "/sys/fs/bpf/mantle";

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
fn safe_dir(d: &Path) -> Result<(), Error> {
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
            "{} is not a directory that only root can change (owner uid {}, mode {:o}):              mantle did not make it and will not use it; remove it (`rm -r {}`) and retry",
            d.display(),
            m.uid(),
            m.mode() & 0o7777,
            d.display()
        )));
    }
    Ok(())
}

/// Creates `d` (root's, `mode`) or checks an existing one with `safe_dir`.
fn make_safe_dir(d: &Path, mode: u32) -> Result<(), Error> {
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

fn kerr(what: impl Into<String>, e: impl std::fmt::Display) -> Error {
    Error::Kernel(format!("{}: {e}", what.into()))
}

fn io_last(what: &str) -> Error {
    kerr(what, std::io::Error::last_os_error())
}

/// Where cgroup programs attach: the cgroup v2 root.
pub fn cgroup_root() -> Result<PathBuf, Error> {
    mantle_sys::probe::cgroup2_mount().ok_or_else(|| {
        Error::Missing("cgroup v2 is not mounted (needed for connect/sendmsg hooks)".into())
    })
}

fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768)
        .clamp(1024, 4 << 20)
}

/// What `up` attached and where.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UpReport {
    pub pin_root: String,
    pub view_entries: u32,
    pub ctl_lib: String,
    pub cgroup: String,
}

/// Loads tags.bpf.o, pins maps and programs, attaches the always-on hooks
/// (cgroup connect marking, the self-operation uprobe, the iterators).
/// Load-time choices.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpOpts {
    /// Never attach sys_exit: pipes, FIFOs, eventfd, message queues and
    /// shared memory carry no tags, and no process pays the syscall
    /// tracepoint's slow path (docs/tags.md, "Cost").
    pub no_fd_channels: bool,
}

pub fn up(ctl_lib: &Path, opts: UpOpts) -> Result<UpReport, Error> {
    mantle_sys::os::ensure_bpffs().map_err(|e| kerr("failed to mount bpffs at /sys/fs/bpf", e))?;
    check_pin_dirs()?;
    let _lock = TableLock::take()?;
    clear_unfinished()?;
    if loaded() {
        return Err(Error::AlreadyLoaded);
    }
    refuse_foreign_copy()?;
    check_features()?;
    let cg = cgroup_root()?;
    if !ctl_lib.exists() {
        return Err(Error::Missing(format!(
            "libmantle.so not found at {} (build it with `cargo build --release`, or pass --lib)",
            ctl_lib.display()
        )));
    }
    // Built in a staging directory, published by one rename: observers see
    // no kernel side or a whole one (issue 8, `kill -9` during `tags up`).
    make_safe_dir(Path::new(PIN_PARENT), 0o755)?;
    let stage = PathBuf::from(format!("{PIN_PARENT}/{STAGING}{}", std::process::id()));
    make_safe_dir(&stage, 0o755)?;
    // progs/ is root's alone: a program fd is all BPF_PROG_RUN needs.
    for (d, mode) in [("maps", 0o755), ("progs", 0o700), ("links", 0o755)] {
        make_safe_dir(&stage.join(d), mode)?;
    }
    let res = up_inner(ctl_lib, &cg, opts, &stage).and_then(|r| {
        std::fs::rename(&stage, PIN_ROOT)
            .map_err(|e| kerr(format!("publish {} as {PIN_ROOT}", stage.display()), e))?;
        Ok(r)
    });
    if res.is_err() {
        let _ = unpin_tree(&stage);
    }
    res
}

/// Prefix of the directories `up` builds in and `down` tears down in.
const STAGING: &str = "unfinished-"; // bpffs refuses names with a dot

/// Removes what a `tags up` or `tags down` that died half-way left under
/// PIN_PARENT (its links keep hooks attached until unpinned). The table
/// lock is held, so no live `up` or `down` is using them.
fn clear_unfinished() -> Result<(), Error> {
    let Ok(rd) = std::fs::read_dir(PIN_PARENT) else {
        return Ok(());
    };
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().starts_with(STAGING) {
            safe_dir(&e.path())?;
            unpin_tree(&e.path())?;
        }
    }
    Ok(())
}

/// Refuses to load while programs of another tags kernel side are loaded
/// outside PIN_ROOT (pinned elsewhere, or held by a running process): two
/// copies would both deliver tags. Programs of an unpinned link are freed
/// by a kernel work item, so a copy just taken down may linger briefly.
fn refuse_foreign_copy() -> Result<(), Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let found = loaded_prog_ids("mt_ctl_self");
        match found.first() {
            None => return Ok(()),
            Some(id) if std::time::Instant::now() >= deadline => {
                return Err(Error::Refused(format!(
                    "another tags kernel side is loaded but not pinned at {PIN_ROOT} \
                     (program mt_ctl_self, id {id}): find its pins or its process \
                     (`bpftool prog show id {id}`) and remove them before `tags up`"
                )))
            }
            Some(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

/// Ids of the loaded BPF programs named `name` (root: walks every id).
fn loaded_prog_ids(name: &str) -> Vec<u32> {
    let mut ids = Vec::new();
    let mut id = 0u32;
    // SAFETY: out-pointer to a local; ends with an error at the last id.
    while unsafe { libbpf_sys::bpf_prog_get_next_id(id, &mut id) } == 0 {
        // SAFETY: plain id lookup; a negative result is an errno.
        let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
        if fd < 0 {
            continue; // freed meanwhile
        }
        // SAFETY: a new fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut info = libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: info/len valid for writing.
        let rc =
            unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
        if rc == 0 && crate::abi::cstr(&info.name.map(|c| c as u8)) == name {
            ids.push(id);
        }
    }
    ids
}

/// Unpins every object under `root` (links first, so hooks detach before
/// the maps they use vanish) and removes the directories.
fn unpin_tree(root: &Path) -> Result<(), Error> {
    for d in ["links", "progs", "maps"] {
        let dir = root.join(d);
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                std::fs::remove_file(e.path()).map_err(|e| kerr(format!("unpin {d}"), e))?;
            }
        }
        let _ = std::fs::remove_dir(&dir);
    }
    std::fs::remove_dir(root).map_err(|e| kerr(format!("remove {}", root.display()), e))
}

/// What the kernel side needs, by `mantle doctor` id, checked before loading
/// so that a missing feature is named instead of a verifier log.
pub const REQUIRED: &[&str] = &[
    "btf",
    "prog_tp_btf",
    "prog_uprobe",
    "prog_cgroup_connect4",
    "prog_cgroup_connect_unix",
    "prog_iter_task",
    "map_task_storage",
    "map_sk_storage",
    "map_mmapable_array",
    "tracepoints_tags",
];

fn check_features() -> Result<(), Error> {
    let r = mantle_sys::probe::probe_all();
    let missing: Vec<String> = REQUIRED
        .iter()
        .filter_map(|id| match r.get(id) {
            Some(f) if f.available => None,
            Some(f) => Some(format!("{} ({})", f.name, f.detail)),
            None => Some(id.to_string()),
        })
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Missing(format!(
            "the tags kernel side needs: {}",
            missing.join("; ")
        )))
    }
}

fn up_inner(ctl_lib: &Path, cg: &Path, opts: UpOpts, root: &Path) -> Result<UpReport, Error> {
    let view_entries = pid_max();
    // First with the fast fd-array path (Linux 6.13+), then without it.
    let mut obj = MaybeUninit::uninit();
    let mut obj2 = MaybeUninit::uninit();
    let open = |obj, direct_fd: bool| {
        let mut open = TagsSkelBuilder::default()
            .open(obj)
            .map_err(|e| kerr("failed to open the tags eBPF object", e))?;
        open.maps
            .view
            .set_max_entries(view_entries)
            .map_err(|e| kerr("size view map", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.mt_direct_fd = direct_fd as u32;
        }
        open.load().map_err(|e| {
            kerr(
                "failed to load tags programs (verifier or kernel refused them)",
                e,
            )
        })
    };
    // MANTLE_TAGS_COMPAT=1 forces the portable path (tests exercise it).
    let fast = std::env::var_os("MANTLE_TAGS_COMPAT").is_none();
    let mut skel = match fast.then(|| open(&mut obj, true)) {
        Some(Ok(s)) => s,
        _ => open(&mut obj2, false)?,
    };

    // What the loader alone writes, before anything can read it.
    {
        use libbpf_rs::MapCore;
        let identity = std::fs::read_to_string("/etc/machine-id")
            .unwrap_or_else(|_| mantle_sys::os::hostname());
        let mut c = crate::abi::Ctl::zeroed();
        c.view_size = view_entries;
        c.host_id = crate::model::machine_host_id(&identity);
        c.host_netns = own_netns_cookie().unwrap_or(0);
        c.opts = if opts.no_fd_channels {
            crate::abi::OPT_NO_FD_CHANNELS
        } else {
            0
        };
        skel.maps
            .ctl
            .update(&0u32.to_ne_bytes(), c.as_bytes(), libbpf_rs::MapFlags::ANY)
            .map_err(|e| kerr("initialise ctl", e))?;
    }
    // Freeze every map that users other than root can open. Since Linux 6.4
    // an unprivileged user can BPF_OBJ_GET a read-only fd of a readable pin,
    // BPF_OBJ_PIN it into a bpffs of their own and reopen that read-write:
    // a pin's mode protects nothing (issue 8). A frozen map refuses every
    // write from user space (updates, writable mmaps), root's included; the
    // programs still write it, and root changes the table through the
    // root-only mt_admin program.
    {
        use std::os::fd::AsFd;
        let m = &skel.maps;
        for (name, fd) in [
            ("view", m.view.as_fd()),
            ("ctl", m.ctl.as_fd()),
            ("tags", m.tags.as_fd()),
            ("stats", m.stats.as_fd()),
        ] {
            debug_assert!(MAPS.iter().any(|&(n, public)| n == name && public));
            // SAFETY: valid map fd.
            let rc = unsafe { libbpf_sys::bpf_map_freeze(fd.as_raw_fd()) };
            if rc < 0 {
                return Err(kerr(
                    format!("freeze map {name}"),
                    std::io::Error::from_raw_os_error(-rc),
                ));
            }
        }
    }
    // Pin maps: the frozen ones readable by everybody, the rest root's.
    {
        use libbpf_rs::skel::Skel;
        use libbpf_rs::MapCore;
        // Every map of MAPS, found by name in the loaded object.
        let mut found = 0;
        for mut map in skel.object_mut().maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            let Some(&(name, public)) = MAPS.iter().find(|(n, _)| *n == name) else {
                continue; // .rodata and friends
            };
            found += 1;
            let p = pin_at(root, "maps", name);
            map.pin(&p)
                .map_err(|e| kerr(format!("pin map {name}"), e))?;
            // mmap(MAP_SHARED) needs an fd opened for writing even to read
            // (see MappedMap::map), so the mmapable frozen maps are 0666:
            // opening them read-write still writes nothing.
            let mode = match (public, name) {
                (true, "view" | "ctl" | "tags") => 0o666,
                (true, _) => 0o444,
                (false, _) => 0o600,
            };
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
                .map_err(|e| kerr(format!("chmod pin of map {name}"), e))?;
        }
        if found != MAPS.len() {
            return Err(kerr(
                "pin maps",
                format!(
                    "tags.bpf.o has {found} of the {} maps mantle pins",
                    MAPS.len()
                ),
            ));
        }
    }

    // Fault injection for the test of a `tags up` killed half-way: stall
    // here, with the maps pinned and nothing else (tests/tags.rs).
    if std::env::var_os("MANTLE_TEST_STALL_AFTER_MAPS").is_some() {
        std::thread::sleep(std::time::Duration::from_secs(30));
    }

    // Pin programs so later commands can attach the tagged hooks.
    {
        let p = &mut skel.progs;
        let progs: Vec<(&str, &mut libbpf_rs::ProgramMut)> = vec![
            ("mt_fork", &mut p.mt_fork),
            ("mt_exit", &mut p.mt_exit),
            ("mt_signal", &mut p.mt_signal),
            ("mt_sock_send", &mut p.mt_sock_send),
            ("mt_unix_queued", &mut p.mt_unix_queued),
            ("mt_sock_recv", &mut p.mt_sock_recv),
            ("mt_sys_exit", &mut p.mt_sys_exit),
            ("mt_tcp_sendmsg", &mut p.mt_tcp_sendmsg),
            ("mt_arm_expiry", &mut p.mt_arm_expiry),
            ("mt_admin", &mut p.mt_admin),
            ("mt_sendmsg4", &mut p.mt_sendmsg4),
            ("mt_sendmsg6", &mut p.mt_sendmsg6),
        ];
        for (name, prog) in progs {
            prog.pin(pin_at(root, "progs", name))
                .map_err(|e| kerr(format!("pin program {name}"), e))?;
        }
    }

    // Always-on hooks.
    let cgf =
        std::fs::File::open(cg).map_err(|e| kerr(format!("open cgroup {}", cg.display()), e))?;
    let cgfd = cgf.as_raw_fd();
    let p = &skel.progs;
    let mut always: Vec<(&str, libbpf_rs::Link, u32)> = vec![
        (
            "connect4",
            p.mt_connect4
                .attach_cgroup(cgfd)
                .map_err(|e| kerr("attach cgroup/connect4", e))?,
            0o600,
        ),
        (
            "connect6",
            p.mt_connect6
                .attach_cgroup(cgfd)
                .map_err(|e| kerr("attach cgroup/connect6", e))?,
            0o600,
        ),
        (
            "connect_unix",
            p.mt_connect_unix
                .attach_cgroup(cgfd)
                .map_err(|e| kerr("attach cgroup/connect_unix (Linux 6.7+)", e))?,
            0o600,
        ),
        (
            "sockops",
            p.mt_sockops
                .attach_cgroup(cgfd)
                .map_err(|e| kerr("attach sockops (TCP header options)", e))?,
            0o600,
        ),
        (
            // always: a listener made before the first tag still has an owner
            "listen",
            p.mt_listen
                .attach()
                .map_err(|e| kerr("attach tp_btf/inet_sock_set_state", e))?,
            0o600,
        ),
        (
            "op_iter",
            p.mt_op_iter
                .attach()
                .map_err(|e| kerr("attach op iterator", e))?,
            0o600,
        ),
        (
            "list_iter",
            p.mt_list_iter
                .attach()
                .map_err(|e| kerr("attach list iterator", e))?,
            0o600,
        ),
        (
            "sweep_iter",
            p.mt_sweep_iter
                .attach()
                .map_err(|e| kerr("attach sweep iterator", e))?,
            0o444,
        ),
    ];
    let opts = libbpf_rs::UprobeOpts {
        func_name: Some("mantle_tag_ctl".into()),
        ..Default::default()
    };
    let up = p
        .mt_ctl_self
        .attach_uprobe_with_opts(-1, ctl_lib, 0, opts)
        .map_err(|e| {
            kerr(
                format!("attach uprobe on mantle_tag_ctl in {}", ctl_lib.display()),
                e,
            )
        })?;
    always.push(("ctl_self", up, 0o600));
    for (name, link, mode) in always.iter_mut() {
        let path = pin_at(root, "links", name);
        link.pin(&path)
            .map_err(|e| kerr(format!("pin link {name}"), e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| kerr(format!("chmod pin of link {name}"), e))?;
    }
    std::fs::create_dir_all("/run/mantle").map_err(|e| kerr("create /run/mantle", e))?;
    std::fs::write(LIB_NOTE, ctl_lib.to_string_lossy().as_bytes())
        .map_err(|e| kerr(format!("write {LIB_NOTE}"), e))?;
    Ok(UpReport {
        pin_root: PIN_ROOT.into(),
        view_entries,
        ctl_lib: ctl_lib.display().to_string(),
        cgroup: cg.display().to_string(),
    })
}

/// Unloads: the tree leaves PIN_ROOT by one rename (tools see "not
/// loaded" at once), then is unpinned, links first.
pub fn down() -> Result<(), Error> {
    check_pin_dirs()?;
    let _lock = TableLock::take()?;
    clear_unfinished()?;
    if !Path::new(PIN_ROOT).exists() {
        return Err(Error::NotLoaded);
    }
    let dying = PathBuf::from(format!("{PIN_PARENT}/{STAGING}{}", std::process::id()));
    std::fs::rename(PIN_ROOT, &dying).map_err(|e| kerr(format!("move {PIN_ROOT} away"), e))?;
    let _ = std::fs::remove_file(LIB_NOTE);
    unpin_tree(&dying)
}

/// Whether the tagged hooks are attached.
pub fn hooks_attached() -> bool {
    pin("links", TAGGED_HOOKS[0].0).exists()
}

/// Attaches (and pins) the hooks needed while tags exist. Idempotent.
pub fn attach_tagged() -> Result<(), Error> {
    let mut cgf = None;
    let opts = MappedMap::open_ro::<crate::abi::Ctl>("ctl")?
        .get::<crate::abi::Ctl>(0)
        .opts;
    for (name, hook) in TAGGED_HOOKS {
        let lp = pin("links", name);
        if lp.exists() || (*name == "mt_sys_exit" && opts & crate::abi::OPT_NO_FD_CHANNELS != 0) {
            continue;
        }
        let prog = libbpf_rs::Program::fd_from_pinned_path(pin("progs", name))
            .map_err(|e| kerr(format!("open pinned program {name}"), e))?;
        let fd = match hook {
            // SAFETY: prog is a valid program fd; NULL name = BTF-typed tracepoint.
            Hook::RawTp => unsafe {
                libbpf_sys::bpf_raw_tracepoint_open(std::ptr::null(), prog.as_raw_fd())
            },
            Hook::Cgroup(at) => {
                if cgf.is_none() {
                    let cg = cgroup_root()?;
                    cgf = Some(std::fs::File::open(&cg).map_err(|e| kerr("open cgroup", e))?);
                }
                let cgfd = cgf.as_ref().unwrap().as_raw_fd();
                // SAFETY: valid fds; NULL opts.
                unsafe {
                    libbpf_sys::bpf_link_create(prog.as_raw_fd(), cgfd, *at, std::ptr::null())
                }
            }
        };
        if fd < 0 {
            return Err(kerr(
                format!("attach {name}"),
                std::io::Error::from_raw_os_error(-fd),
            ));
        }
        // SAFETY: fd is a new link fd we own.
        let link = unsafe { OwnedFd::from_raw_fd(fd) };
        let c = CString::new(lp.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: valid fd and path.
        let rc = unsafe { libbpf_sys::bpf_obj_pin(link.as_raw_fd(), c.as_ptr()) };
        if rc < 0 {
            return Err(kerr(
                format!("pin link {name}"),
                std::io::Error::from_raw_os_error(-rc),
            ));
        }
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

/// Runs pinned syscall program `name` once on `ctx` (BPF_PROG_RUN); its
/// return value is 0 or a negative MT_E* error. The pin is root's: others
/// get `Permission` naming `what`.
fn run_syscall_prog<T: Pod>(name: &str, ctx: &mut T, what: &str) -> Result<(), Error> {
    let prog = libbpf_rs::Program::fd_from_pinned_path(pin("progs", name)).map_err(|e| match e
        .kind()
    {
        libbpf_rs::ErrorKind::PermissionDenied => Error::Permission(format!("{what} needs root")),
        libbpf_rs::ErrorKind::NotFound if !loaded() => Error::NotLoaded,
        _ => kerr(format!("open pinned program {name}"), e),
    })?;
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        ctx_in: (ctx as *mut T).cast(),
        ctx_size_in: std::mem::size_of::<T>() as u32,
        ..Default::default()
    };
    // SAFETY: valid program fd; opts points at ctx, live for the call.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    if rc < 0 {
        return Err(kerr(
            format!("run {name}"),
            std::io::Error::from_raw_os_error(-rc),
        ));
    }
    match opts.retval as i32 {
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
pub fn run_iter<T: Pod>(link: &str) -> Result<Vec<T>, Error> {
    if !loaded() {
        return Err(Error::NotLoaded);
    }
    let buf = std::fs::read(pin("links", link)).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            Error::Permission(format!("running the {link} iterator needs root"))
        }
        _ => kerr(format!("run iterator {link}"), e),
    })?;
    let n = std::mem::size_of::<T>();
    Ok(buf.chunks_exact(n).map(T::from_bytes).collect())
}

/// A pinned map opened by path, with its fd and geometry.
pub struct PinnedMap {
    fd: OwnedFd,
    pub value_size: u32,
    pub max_entries: u32,
}

impl PinnedMap {
    pub fn open(name: &str, write: bool) -> Result<PinnedMap, Error> {
        let path = pin("maps", name);
        if !loaded() {
            return Err(Error::NotLoaded);
        }
        let c = CString::new(path.to_string_lossy().as_bytes()).unwrap();
        let opts = libbpf_sys::bpf_obj_get_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_obj_get_opts>() as _,
            file_flags: if write { 0 } else { libbpf_sys::BPF_F_RDONLY },
            ..Default::default()
        };
        // SAFETY: valid path and opts.
        let fd = unsafe { libbpf_sys::bpf_obj_get_opts(c.as_ptr(), &opts) };
        if fd < 0 {
            let e = std::io::Error::from_raw_os_error(-fd);
            return Err(match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    Error::Permission(format!("map {name} is readable by root only"))
                }
                _ => kerr(format!("open pinned map {}", path.display()), e),
            });
        }
        // SAFETY: new fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut info = libbpf_sys::bpf_map_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
        // SAFETY: info/len valid for writing.
        let rc = unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
        if rc < 0 {
            return Err(kerr(
                format!("map info {name}"),
                std::io::Error::from_raw_os_error(-rc),
            ));
        }
        Ok(PinnedMap {
            fd,
            value_size: info.value_size,
            max_entries: info.max_entries,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn lookup<K: Pod, V: Pod>(&self, key: &K) -> Result<Option<V>, Error> {
        let mut v = V::zeroed();
        // SAFETY: key/value buffers match the map's sizes (checked by layout tests).
        let rc = unsafe {
            libbpf_sys::bpf_map_lookup_elem(
                self.fd.as_raw_fd(),
                (key as *const K).cast(),
                (&mut v as *mut V).cast(),
            )
        };
        if rc == -libc::ENOENT {
            return Ok(None);
        }
        if rc < 0 {
            return Err(kerr("map lookup", std::io::Error::from_raw_os_error(-rc)));
        }
        Ok(Some(v))
    }

    /// The sum over CPUs of entry `key` of a per-CPU array of u64 fields.
    pub fn percpu_sum<V: Pod>(&self, key: u32) -> Result<V, Error> {
        // SAFETY: no arguments; returns the possible-CPU count or -errno.
        let ncpu = unsafe { libbpf_sys::libbpf_num_possible_cpus() };
        if ncpu <= 0 {
            return Err(kerr("count CPUs", std::io::Error::from_raw_os_error(-ncpu)));
        }
        let stride = (std::mem::size_of::<V>() + 7) & !7;
        let mut buf = vec![0u8; stride * ncpu as usize];
        // SAFETY: buf holds one value per possible CPU, as the kernel writes.
        let rc = unsafe {
            libbpf_sys::bpf_map_lookup_elem(
                self.fd.as_raw_fd(),
                (&key as *const u32).cast(),
                buf.as_mut_ptr().cast(),
            )
        };
        if rc < 0 {
            return Err(kerr(
                "per-CPU map lookup",
                std::io::Error::from_raw_os_error(-rc),
            ));
        }
        let words = std::mem::size_of::<V>() / 8;
        let mut sum = vec![0u64; words];
        for cpu in buf.chunks_exact(stride) {
            for (i, w) in cpu.chunks_exact(8).take(words).enumerate() {
                sum[i] += u64::from_ne_bytes(w.try_into().unwrap());
            }
        }
        let bytes: Vec<u8> = sum.iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(V::from_bytes(&bytes))
    }

    pub fn update<K: Pod, V: Pod>(&self, key: &K, val: &V) -> Result<(), Error> {
        // SAFETY: as for lookup.
        let rc = unsafe {
            libbpf_sys::bpf_map_update_elem(
                self.fd.as_raw_fd(),
                (key as *const K).cast(),
                (val as *const V).cast(),
                0,
            )
        };
        if rc < 0 {
            return Err(kerr("map update", std::io::Error::from_raw_os_error(-rc)));
        }
        Ok(())
    }
}

unsafe impl Pod for u8 {}
unsafe impl Pod for u32 {}
unsafe impl Pod for u64 {}
unsafe impl Pod for i32 {}

/// The pins outlive the binary that made them: a kernel side loaded by
/// another build of mantle may lay its structs out differently.
fn stale(name: &str, found: usize, expected: usize) -> Error {
    Error::Refused(format!(
        "the loaded tags kernel side comes from another build of mantle (map {name}: entries of \
         {found} bytes, this build expects {expected}); reload it: `mantle tags down && mantle tags up`"
    ))
}

/// An mmapable array map, mapped for reading (or writing, for root).
pub struct MappedMap {
    _map: PinnedMap,
    base: *mut u8,
    len: usize,
    stride: usize,
}

// SAFETY: the mapping is shared memory accessed with atomics or plain reads
// of Pod data; the pointer is valid for the life of the struct.
unsafe impl Send for MappedMap {}
unsafe impl Sync for MappedMap {}

impl MappedMap {
    /// Map pinned array `name` whose entries are `T`s, read-only.
    pub fn open_ro<T: Pod>(name: &str) -> Result<MappedMap, Error> {
        Self::map(name, false, std::mem::size_of::<T>())
    }
    /// Map pinned array `name` whose entries are `T`s, for writing.
    pub fn open_rw<T: Pod>(name: &str) -> Result<MappedMap, Error> {
        Self::map(name, true, std::mem::size_of::<T>())
    }
    fn map(name: &str, write: bool, entry: usize) -> Result<MappedMap, Error> {
        // mmap(MAP_SHARED) of a file opened read-only loses VM_SHARED, which
        // bpf_map_mmap refuses (EINVAL): even a read-only mapping needs an
        // fd opened for writing. Frozen maps (the view) stay unwritable.
        let m = PinnedMap::open(name, true)?;
        // The pins outlive the binary that made them: a kernel side loaded
        // by another build of mantle may lay its structs out differently.
        if m.value_size as usize != entry {
            return Err(stale(name, m.value_size as usize, entry));
        }
        let stride = (m.value_size as usize + 7) & !7;
        let page = 4096;
        let len = (stride * m.max_entries as usize).div_ceil(page) * page;
        let prot = libc::PROT_READ | if write { libc::PROT_WRITE } else { 0 };
        // SAFETY: mapping a BPF_F_MMAPABLE array fd; len covers the array.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                m.fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io_last(&format!("mmap map {name}")));
        }
        Ok(MappedMap {
            _map: m,
            base: p.cast(),
            len,
            stride,
        })
    }
    pub fn entries(&self) -> usize {
        self._map.max_entries as usize
    }
    /// Pointer to entry i (bounds-checked).
    pub fn ptr<T>(&self, i: usize) -> *mut T {
        assert!(i < self.entries() && std::mem::size_of::<T>() <= self.stride);
        // SAFETY: in bounds of the mapping.
        unsafe { self.base.add(i * self.stride).cast() }
    }
    /// A copy of entry i.
    pub fn get<T: Pod>(&self, i: usize) -> T {
        assert!(std::mem::size_of::<T>() <= self.stride);
        // SAFETY: in bounds; volatile read of shared memory that may change.
        unsafe { std::ptr::read_volatile(self.ptr::<T>(i)) }
    }
}

impl Drop for MappedMap {
    fn drop(&mut self) {
        // SAFETY: base/len came from mmap.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// An exclusive lock serialising table changes between tools.
///
/// The lock file lives in a root-only directory: `flock` needs no write
/// access, so a lock file that anybody can open read-only is a lock that
/// anybody can hold forever (issue 8, item 3). Root commands wait for it a
/// bounded time and then name the holder.
pub struct TableLock(#[allow(dead_code)] std::fs::File);

/// Root-only home of the table lock.
pub const LOCK_DIR: &str = "/run/mantle/lock";
pub const LOCK_FILE: &str = "/run/mantle/lock/tags.lock";

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
        make_safe_dir(Path::new("/run/mantle"), 0o755)?;
        make_safe_dir(Path::new(LOCK_DIR), 0o700)?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(LOCK_FILE)
            .map_err(|e| kerr(format!("open {LOCK_FILE}"), e))?;
        let deadline = std::time::Instant::now() + lock_timeout();
        loop {
            // SAFETY: valid fd.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(TableLock(f));
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(kerr("lock the tag table", e));
            }
            if std::time::Instant::now() >= deadline {
                let holder = lock_holder(&f)
                    .map(|p| format!(" by pid {p}"))
                    .unwrap_or_default();
                return Err(Error::Busy(format!(
                    "the tag table is locked{holder} (another mantle command) and was not \
                     released within {} ms",
                    lock_timeout().as_millis()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// The pid holding a flock on `f`, from /proc/locks (by inode number).
fn lock_holder(f: &std::fs::File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let ino = f.metadata().ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        // "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"
        let f: Vec<&str> = l.split_whitespace().collect();
        let (pid, dev_ino) = (f.get(4)?, f.get(5)?);
        (f.get(1) == Some(&"FLOCK") && dev_ino.rsplit(':').next()?.parse::<u64>().ok()? == ino)
            .then(|| pid.parse().ok())
            .flatten()
    })
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
            if let Some(cookie) = netns_cookie(&e.path()) {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = crate::model::netns_host_id(machine, home, cookie);
                m.entry(id).or_insert(name);
            }
        }
    }
    m
}

/// The cookie of the calling thread's network namespace (SO_NETNS_COOKIE
/// of a fresh socket).
fn own_netns_cookie() -> Option<u64> {
    // SAFETY: a fresh socket, closed before returning; cookie/len valid.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if fd < 0 {
            return None;
        }
        let mut cookie: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        const SO_NETNS_COOKIE: libc::c_int = 71;
        let rc = libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        );
        libc::close(fd);
        (rc == 0).then_some(cookie)
    }
}

/// The cookie of the network namespace at `path`, asked from a short-lived
/// thread that joins it (setns affects only the calling thread).
fn netns_cookie(path: &Path) -> Option<u64> {
    let f = std::fs::File::open(path).ok()?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on this short-lived thread only.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return None;
            }
            own_netns_cookie()
        })
        .join()
        .ok()
        .flatten()
    })
}
