//! Probes of the file systems mantle stands on: the kernel BTF at
//! /sys/kernel/btf/vmlinux, bpffs at /sys/fs/bpf, and the cgroup v2
//! mount (with [`cgroup2_mount`], which the tags subsystem uses too).

use std::io;
use std::path::PathBuf;

use super::Feature;

/// Where cgroup v2 is mounted, from /proc/self/mounts.
///
/// Prefers `/sys/fs/cgroup` (the unified layout), then
/// `/sys/fs/cgroup/unified` (the hybrid layout), then the first cgroup2
/// mount found. `None` if cgroup v2 is not mounted at all.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    cgroup2_mount_in(&mounts)
}

pub(super) fn cgroup2_mount_in(mounts: &str) -> Option<PathBuf> {
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

/// Where the cgroup v1 `freezer` controller is mounted (a `cgroup` mount
/// whose options name `freezer`), from /proc/self/mounts; `None` where it
/// is not (a cgroup v2 only system). The dispatcher prefers it to v2's
/// `cgroup.freeze` (crates/exec dispatch.rs: its writes do not take the
/// kernel's global cgroup mutex).
pub fn cgroup1_freezer_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    cgroup1_freezer_mount_in(&mounts)
}

pub(super) fn cgroup1_freezer_mount_in(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let _dev = f.next()?;
        let point = f.next()?;
        let fstype = f.next()?;
        let opts = f.next()?;
        (fstype == "cgroup" && opts.split(',').any(|o| o == "freezer"))
            .then(|| PathBuf::from(unescape_mount_path(point)))
    })
}

/// /proc/self/mounts writes space, tab, newline and backslash as `\ooo`.
pub(super) fn unescape_mount_path(s: &str) -> String {
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

pub(super) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

pub(super) fn probe_btf() -> Feature {
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

pub(super) fn probe_bpffs() -> Feature {
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

pub(super) fn probe_cgroup2() -> Feature {
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
