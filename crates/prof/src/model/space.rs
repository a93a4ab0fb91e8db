//! Address-space replay: the processes and executable mappings the side
//! band and the /proc snapshot told about, and ip → (image, offset).
//!
//! Mechanism: [`AddressSpaces`] replays the initial /proc maps, then
//! PERF_RECORD_MMAP2, COMM (exec), FORK and EXIT in ring order, the way
//! OProfile's daemon did with its dcookies: user addresses become file
//! offsets in a file (identified by path and build ID), kernel addresses
//! stay addresses in `[kernel.kallsyms]`.
//!
//! Invariants: a process is never forgotten (an exited one still resolves
//! its samples, which are drained up to a second later); munmap is not
//! reported, so a new mapping drops what it overlaps; an exec keeps the
//! last [`OLD_SPACES`] address spaces for samples that predate it.

use super::image::{
    Image, ImageKind, Mode, ANON_IMAGE, JIT_IMAGE, KERNEL_IMAGE, UNKNOWN_IMAGE, VDSO_IMAGE,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// One executable mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    /// File path, or `[vdso]`, `[anon]`, `//anon`, `[heap]`...
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

/// What the side band and /proc told about one process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    /// Main executable (first file mapping after the last exec).
    pub exe: Option<String>,
    pub exited: bool,
    /// Whether this is one of mantle's own processes.
    pub mantle: bool,
    /// Whether /tmp/perf-PID.map was captured for it.
    #[serde(default)]
    pub jit_map: bool,
    #[serde(skip)]
    maps: BTreeMap<u64, Mapping>,
    /// Address spaces before the last execs (newest last, at most
    /// [`OLD_SPACES`]): samples are resolved when drained, up to a second
    /// later, and may predate an exec (ASLR makes overlaps rare).
    #[serde(skip)]
    old: Vec<BTreeMap<u64, Mapping>>,
    /// Changes whenever `maps` does (a value of [`AddressSpaces`]'s
    /// counter, unique across processes): what was built from the
    /// mappings (a DWARF unwinder's module list) is rebuilt when it moves.
    #[serde(skip)]
    generation: u64,
}

/// How many pre-exec address spaces a process keeps for resolution.
pub const OLD_SPACES: usize = 4;

fn lookup(maps: &BTreeMap<u64, Mapping>, ip: u64) -> Option<&Mapping> {
    maps.range(..=ip)
        .next_back()
        .map(|(_, m)| m)
        .filter(|m| ip < m.end)
}

impl Process {
    pub fn maps(&self) -> impl Iterator<Item = &Mapping> {
        self.maps.values()
    }

    /// See [`Process::generation`]'s field: equal values, equal `maps`.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// Address spaces of every process seen while recording.
#[derive(Debug, Default)]
pub struct AddressSpaces {
    pub procs: HashMap<u32, Process>,
    /// Every mapping ever seen, for the session's mappings file.
    pub history: Vec<(u32, Mapping)>,
    /// Which process names count as mantle's own.
    pub mantle_comms: Vec<String>,
    /// The last [`Process::generation`] handed out.
    generations: u64,
}

/// Where an ip landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub image: Image,
    /// File offset (ELF), offset from the start (vDSO), or the address
    /// itself (kernel, anon, JIT, unknown).
    pub offset: u64,
}

fn is_mantle_comm(comm: &str, list: &[String]) -> bool {
    list.iter().any(|m| comm == m)
}

impl AddressSpaces {
    pub fn new(mantle_comms: Vec<String>) -> Self {
        AddressSpaces {
            mantle_comms,
            ..Default::default()
        }
    }

    fn proc_mut(&mut self, pid: u32) -> &mut Process {
        self.procs.entry(pid).or_insert_with(|| Process {
            pid,
            ..Default::default()
        })
    }

    /// A process seen in the /proc snapshot.
    pub fn add_process(&mut self, pid: u32, ppid: u32, comm: &str) {
        let mantle = is_mantle_comm(comm, &self.mantle_comms);
        let p = self.proc_mut(pid);
        p.ppid = ppid;
        p.comm = comm.to_string();
        p.mantle |= mantle;
    }

    /// A new executable mapping (snapshot or PERF_RECORD_MMAP2).
    pub fn mmap(&mut self, pid: u32, m: Mapping) {
        self.history.push((pid, m.clone()));
        self.generations += 1;
        let generation = self.generations;
        let p = self.proc_mut(pid);
        p.generation = generation;
        if p.exe.is_none() && m.path.starts_with('/') {
            p.exe = Some(m.path.clone());
        }
        // drop what the new mapping overlaps (munmap is not reported)
        let overlapping: Vec<u64> = p
            .maps
            .range(..m.end)
            .filter(|(_, o)| o.end > m.start)
            .map(|(s, _)| *s)
            .collect();
        for s in overlapping {
            p.maps.remove(&s);
        }
        p.maps.insert(m.start, m);
    }

    /// PERF_RECORD_COMM; `exec` when it came from an exec (the address
    /// space was replaced: mappings that follow describe the new program).
    pub fn comm(&mut self, pid: u32, tid: u32, comm: &str, exec: bool) {
        if pid != tid && !exec {
            return; // a thread renamed itself: the process keeps its name
        }
        let mantle = is_mantle_comm(comm, &self.mantle_comms);
        self.generations += 1;
        let generation = self.generations;
        let p = self.proc_mut(pid);
        p.comm = comm.to_string();
        p.mantle = mantle;
        if exec {
            p.generation = generation;
            let old = std::mem::take(&mut p.maps);
            if !old.is_empty() {
                p.old.push(old);
                if p.old.len() > OLD_SPACES {
                    p.old.remove(0);
                }
            }
            p.exe = None;
            p.exited = false;
        }
    }

    /// PERF_RECORD_FORK: a new process starts as a copy of its parent.
    pub fn fork(&mut self, pid: u32, ppid: u32, tid: u32) {
        if pid != tid || pid == ppid {
            return; // a new thread
        }
        let parent = self.procs.get(&ppid).cloned().unwrap_or_default();
        self.generations += 1;
        self.procs.insert(
            pid,
            Process {
                pid,
                ppid,
                comm: parent.comm,
                exe: parent.exe,
                exited: false,
                mantle: parent.mantle,
                jit_map: false,
                maps: parent.maps,
                old: Vec::new(),
                generation: self.generations,
            },
        );
    }

    /// PERF_RECORD_EXIT: the process is kept so its samples still resolve.
    pub fn exit(&mut self, pid: u32, tid: u32) {
        if pid == tid {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.exited = true;
            }
        }
    }

    /// The image and offset of one sample.
    pub fn resolve(&self, pid: u32, ip: u64, mode: Mode) -> Resolved {
        if mode == Mode::Kernel || ip >= 0xffff_8000_0000_0000 {
            return Resolved {
                image: Image::named(KERNEL_IMAGE, ImageKind::Kernel),
                offset: ip,
            };
        }
        let m = self.procs.get(&pid).and_then(|p| {
            lookup(&p.maps, ip)
                .or_else(|| p.old.iter().rev().find_map(|o| lookup(o, ip)))
                .map(|m| (p, m))
        });
        let Some((p, m)) = m else {
            return Resolved {
                image: Image::named(UNKNOWN_IMAGE, ImageKind::Unknown),
                offset: ip,
            };
        };
        if m.path.starts_with('/') {
            Resolved {
                image: Image {
                    path: m.path.clone(),
                    kind: ImageKind::Elf,
                    build_id: m.build_id.clone(),
                    pid: None,
                },
                // ip >= m.start (lookup); the page offset comes from the
                // perf ring or /proc: wrapping, never an overflow panic
                offset: (ip - m.start).wrapping_add(m.pgoff),
            }
        } else if m.path == VDSO_IMAGE {
            Resolved {
                image: Image::named(VDSO_IMAGE, ImageKind::Vdso),
                offset: ip - m.start,
            }
        } else if p.jit_map {
            Resolved {
                image: Image {
                    path: JIT_IMAGE.into(),
                    kind: ImageKind::Jit,
                    build_id: None,
                    pid: Some(pid),
                },
                offset: ip,
            }
        } else {
            Resolved {
                image: Image::named(ANON_IMAGE, ImageKind::Anon),
                offset: ip,
            }
        }
    }
}

/// Parses one line of /proc/PID/maps; executable mappings only.
pub fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut f = line.split_whitespace();
    let range = f.next()?;
    let perms = f.next()?;
    let off = f.next()?;
    let _dev = f.next()?;
    let _ino = f.next()?;
    let path: String = f.collect::<Vec<_>>().join(" ");
    if !perms.contains('x') {
        return None;
    }
    let (s, e) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        pgoff: u64::from_str_radix(off, 16).ok()?,
        path: if path.is_empty() {
            "//anon".into()
        } else {
            path
        },
        build_id: None,
    })
}
