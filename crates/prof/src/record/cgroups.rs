//! Per-sample cgroups: where each sample's cgroup id comes from, and its
//! path, resolved while recording (a cgroup removed before the report
//! could no longer be named).
//!
//! Mechanism: the cgroup v2 id of a task is the inode number of its
//! directory in the cgroup2 file system (kernfs node id), what
//! `bpf_get_current_cgroup_id` and PERF_SAMPLE_CGROUP give. The eBPF
//! sample path reads it in the sample interrupt; the perf-ring path asks
//! the perf core for PERF_SAMPLE_CGROUP where the kernel has it and the
//! perf_event controller is on the v2 hierarchy (its ids are then v2
//! ids), and otherwise reads `/proc/PID/cgroup` once per process, at its
//! first sample (a process that moves later keeps its first cgroup: said
//! in the session's warnings). Ids are named by walking the cgroup2 mount
//! (each directory's inode), again whenever a drain meets an id not yet
//! named, at most once per [`RESCAN`].
//!
//! Invariant: an id is never given a path other than the directory whose
//! inode it is; ids no walk found stay unnamed (`cgroup:ID` in reports).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Least time between two walks of the cgroup tree for unknown ids.
pub(super) const RESCAN: Duration = Duration::from_millis(200);

/// Most directories walked (a runaway tree is not walked forever).
const WALK_MAX: usize = 100_000;

/// How the samples of a recording got their cgroup (the session's
/// `meta.json` `cgroups`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `bpf_get_current_cgroup_id` in the eBPF sample path.
    Bpf,
    /// PERF_SAMPLE_CGROUP in each perf-ring sample record.
    PerfSample,
    /// `/proc/PID/cgroup` at each process's first sample.
    Proc,
    /// No cgroup v2 mounted: samples carry none.
    None,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Bpf => "bpf",
            Source::PerfSample => "perf-sample",
            Source::Proc => "proc",
            Source::None => "none",
        }
    }
}

/// The cgroup2 mount point, from a mountinfo text (the first cgroup2
/// line's mount point). Pure.
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2")
            .then(|| pre.split_whitespace().nth(4).map(unescape_octal))
            .flatten()
            .map(PathBuf::from)
    })
}

/// mountinfo's `\040`-style escapes undone.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Some(v) = s
                .get(i + 1..i + 4)
                .and_then(|o| u8::from_str_radix(o, 8).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The v2 path of a process's cgroup from its `/proc/PID/cgroup` text
/// (the `0::/path` line). Pure.
pub fn v2_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.strip_suffix(" (deleted)").unwrap_or(p))
}

/// Whether the perf_event controller sits on a v1 hierarchy (a
/// `N:...perf_event...:` line in `/proc/self/cgroup`): PERF_SAMPLE_CGROUP
/// then gives ids of that hierarchy, not v2 ids. Pure.
pub fn perf_event_on_v1(proc_cgroup: &str) -> bool {
    proc_cgroup.lines().any(|l| {
        let mut f = l.splitn(3, ':');
        let (id, ctl) = (f.next(), f.next());
        id != Some("0") && ctl.is_some_and(|c| c.split(',').any(|c| c == "perf_event"))
    })
}

/// Cgroup ids met while recording, and their paths.
pub(super) struct Cgroups {
    pub source: Source,
    root: Option<PathBuf>,
    /// id -> path relative to the cgroup2 root (`/` for the root).
    pub names: HashMap<u64, String>,
    /// `Source::Proc`: each process's cgroup id at its first sample.
    per_pid: HashMap<u32, u64>,
    last_walk: Option<Instant>,
    /// Ids seen that no walk has named yet.
    unknown: std::collections::HashSet<u64>,
}

impl Cgroups {
    /// Finds the cgroup2 mount; `source` is what the sample path gives
    /// (downgraded to [`Source::None`] without a cgroup2 mount).
    pub fn new(source: Source) -> Cgroups {
        let root = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|m| cgroup2_mount(&m));
        let source = if root.is_none() { Source::None } else { source };
        let mut c = Cgroups {
            source,
            root,
            names: HashMap::new(),
            per_pid: HashMap::new(),
            last_walk: None,
            unknown: Default::default(),
        };
        c.walk();
        c
    }

    /// Names every cgroup of the tree (inode -> relative path).
    fn walk(&mut self) {
        self.last_walk = Some(Instant::now());
        let Some(root) = self.root.clone() else {
            return;
        };
        let mut todo = vec![(root.clone(), "/".to_string())];
        let mut n = 0;
        while let Some((dir, rel)) = todo.pop() {
            n += 1;
            if n > WALK_MAX {
                break;
            }
            let Ok(m) = std::fs::symlink_metadata(&dir) else {
                continue;
            };
            self.names.insert(m.ino(), rel.clone());
            self.unknown.remove(&m.ino());
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let child = if rel == "/" {
                        format!("/{name}")
                    } else {
                        format!("{rel}/{name}")
                    };
                    todo.push((e.path(), child));
                }
            }
        }
    }

    /// Notes a sample's cgroup id: an id not yet named is named at the
    /// next [`Cgroups::settle`].
    pub fn saw(&mut self, id: u64) {
        if id != 0 && !self.names.contains_key(&id) {
            self.unknown.insert(id);
        }
    }

    /// Walks the tree again if ids were met that it has not named (at
    /// most once per [`RESCAN`], and always when `force`: the end).
    pub fn settle(&mut self, force: bool) {
        if self.unknown.is_empty() {
            return;
        }
        if force || self.last_walk.is_none_or(|t| t.elapsed() >= RESCAN) {
            self.walk();
        }
    }

    /// `Source::Proc`: the cgroup id of process `pid`, read at its first
    /// sample from `/proc/PID/cgroup` (0 when gone or unreadable).
    pub fn of_pid(&mut self, pid: u32) -> u64 {
        if pid == 0 {
            // the idle task: the root cgroup
            return self.root_id();
        }
        if let Some(&id) = self.per_pid.get(&pid) {
            return id;
        }
        let id = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|t| {
                let rel = v2_path(&t)?.to_string();
                let root = self.root.as_ref()?;
                let dir = root.join(rel.trim_start_matches('/'));
                let ino = std::fs::symlink_metadata(&dir).ok()?.ino();
                self.names.insert(ino, rel);
                Some(ino)
            })
            .unwrap_or(0);
        self.per_pid.insert(pid, id);
        id
    }

    fn root_id(&self) -> u64 {
        self.root
            .as_deref()
            .and_then(|r| std::fs::symlink_metadata(r).ok())
            .map_or(0, |m| m.ino())
    }

    /// The cgroups of `ids` that were named, sorted by id.
    pub fn table(&self, ids: impl IntoIterator<Item = u64>) -> Vec<(u64, String)> {
        let mut v: Vec<(u64, String)> = ids
            .into_iter()
            .filter_map(|id| self.names.get(&id).map(|p| (id, p.clone())))
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

/// Whether this kernel takes PERF_SAMPLE_CGROUP (5.7+, CONFIG_CGROUP_PERF):
/// a user-mode software event on this thread is opened with it, and
/// closed.
pub(super) fn perf_sample_cgroup_works() -> bool {
    use crate::kernel::{self, attr, PerfEventAttr};
    let a = PerfEventAttr {
        type_: mantle_sys::perf::PERF_TYPE_SOFTWARE,
        config: mantle_sys::perf::PERF_COUNT_SW_CPU_CLOCK,
        sample_period: 1_000_000,
        sample_type: kernel::PERF_SAMPLE_IP | kernel::PERF_SAMPLE_CGROUP,
        flags: attr::DISABLED | attr::EXCLUDE_KERNEL,
        ..Default::default()
    };
    kernel::perf_event_open(&a, 0, -1).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_point_of_cgroup2() {
        let mi = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                  40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n\
                  41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(mi),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let sp = "41 31 0:38 / /mnt/cg\\040v2 rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_mount(sp), Some(PathBuf::from("/mnt/cg v2")));
        assert_eq!(cgroup2_mount("31 23 0:28 / /x rw - tmpfs tmpfs rw\n"), None);
    }

    #[test]
    fn v2_path_and_v1_perf_event() {
        let t = "9:name=systemd:/\n4:memory:/a/b\n0::/system.slice/x.scope\n";
        assert_eq!(v2_path(t), Some("/system.slice/x.scope"));
        assert_eq!(v2_path("0::/gone (deleted)\n"), Some("/gone"));
        assert_eq!(v2_path("4:memory:/a\n"), None);
        assert!(!perf_event_on_v1(t));
        assert!(perf_event_on_v1("5:cpu,perf_event:/\n0::/\n"));
        assert!(perf_event_on_v1("5:perf_event:/\n"));
    }
}
