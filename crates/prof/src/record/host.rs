//! What the host says before and after a recording: its CPUs, the sample
//! rate limit, the processes and mappings already there (/proc), the
//! kernel's text symbols (/proc/kallsyms), and the tag table's names.
//!
//! Mechanism: plain reads of /sys, /proc and the tags subsystem's pinned
//! maps (read-only). Invariant: nothing here fails a recording: what
//! cannot be read is left out (and said so in the session where it
//! matters: `kernel_symbols`, `tags_loaded`).

use crate::model::{self, AddressSpaces, TagName};

/// Online CPUs (from /sys/devices/system/cpu/online, e.g. "0-1,4").
pub fn online_cpus() -> Vec<u32> {
    let s =
        std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_else(|_| "0".into());
    parse_cpu_list(s.trim())
}

pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    v.extend(a..=b);
                }
            }
            None => {
                if let Ok(a) = part.parse() {
                    v.push(a)
                }
            }
        }
    }
    v
}

pub fn max_sample_rate() -> Option<i64> {
    mantle_sys::probe::sysctl("perf_event_max_sample_rate").or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
}

/// The deepest callchain to ask the perf core for: `MP_MAX_STACK`, or
/// less when `kernel.perf_event_max_stack` is lower (perf_event_open
/// refuses a `sample_max_stack` above it, EINVAL).
pub(super) fn max_stack() -> u16 {
    let limit: Option<i64> = mantle_sys::probe::sysctl("perf_event_max_stack");
    let ours = crate::abi::MP_MAX_STACK as i64;
    limit.map_or(ours, |l| l.clamp(1, ours)) as u16
}

/// The process names that count as mantle's own: `mantle` and this
/// process's name.
pub(super) fn mantle_comms() -> Vec<String> {
    let own_comm = std::fs::read_to_string("/proc/self/comm")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut mantle_comms = vec!["mantle".to_string()];
    if !own_comm.is_empty() && own_comm != "mantle" {
        mantle_comms.push(own_comm);
    }
    mantle_comms
}

/// Reads the executable mappings of every process (or of `only`) from /proc.
pub(super) fn snapshot_proc(sp: &mut AddressSpaces, only: Option<&[u32]>) {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if only.is_some_and(|o| !o.contains(&pid)) {
            continue;
        }
        let dir = e.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let ppid = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| {
                let r = s.rsplit_once(')')?.1.to_string();
                r.split_whitespace().nth(1)?.parse().ok()
            })
            .unwrap_or(0);
        sp.add_process(pid, ppid, comm.trim());
        if let Ok(maps) = std::fs::read_to_string(dir.join("maps")) {
            for l in maps.lines() {
                if let Some(m) = model::parse_maps_line(l) {
                    sp.mmap(pid, m);
                }
            }
        }
    }
}

/// Text symbols of /proc/kallsyms (None when addresses are hidden).
pub(super) fn kallsyms_text() -> Option<String> {
    let s = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let mut out = String::with_capacity(s.len() / 2);
    let mut nonzero = false;
    for l in s.lines() {
        let mut f = l.split_whitespace();
        let (Some(a), Some(t)) = (f.next(), f.next()) else {
            continue;
        };
        if matches!(t, "t" | "T" | "w" | "W") {
            if a.bytes().any(|c| c != b'0') {
                nonzero = true;
            }
            out.push_str(l);
            out.push('\n');
        }
    }
    nonzero.then_some(out)
}

/// The tag table's names, and whether the tags kernel side could be read.
/// When it is not loaded, or was loaded by another mantle build with
/// another layout (`Tags::open` refuses it with an error), the profile is
/// recorded without names (`tags_loaded: false` in the session).
pub(super) fn tag_names() -> (bool, Vec<TagName>) {
    match mantle_tags::Tags::open() {
        Ok(t) => (
            true,
            t.list()
                .unwrap_or_default()
                .into_iter()
                .map(|i| TagName {
                    bit: i.bit,
                    name: i.name,
                })
                .collect(),
        ),
        Err(_) => (false, Vec::new()),
    }
}

/// The names known at the end of the recording, plus those of tags
/// deleted meanwhile (known at the start only), by bit.
pub(super) fn merge_tag_names(start: Vec<TagName>, end: Vec<TagName>) -> Vec<TagName> {
    let mut tags = end;
    for t in start {
        if !tags.iter().any(|x| x.bit == t.bit) {
            tags.push(t);
        }
    }
    tags.sort_by_key(|t| t.bit);
    tags
}

pub(super) fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn cpu_list() {
        assert_eq!(parse_cpu_list("0-1"), vec![0, 1]);
        assert_eq!(parse_cpu_list("0,2-3,7"), vec![0, 2, 3, 7]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert!(parse_cpu_list("").is_empty());
    }
}
