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

/// `kernel.perf_event_paranoid` (None when unreadable).
pub fn perf_event_paranoid() -> Option<i64> {
    mantle_sys::probe::sysctl("perf_event_paranoid").or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
}

/// The deepest callchain a recording asks for, and what to say when the
/// kernel allows deeper than the recording can keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MaxStack {
    /// `sample_max_stack` of the sampling events.
    pub depth: u16,
    /// Set when `kernel.perf_event_max_stack` is above `depth`.
    pub warning: Option<String>,
}

/// The frames a stack of the eBPF sample path keeps: its table's width.
/// (With `--stacks perf` a user stack keeps one less at the default
/// sysctl: bpf_get_stack copies the perf core's callchain with its
/// PERF_CONTEXT_USER marker first and clamps the copy, marker included,
/// to `kernel.perf_event_max_stack`; `--stacks bpf` and the perf ring
/// keep the sysctl's number. Measured: 126 and 127 frames at 127.)
pub const BPF_MAX_FRAMES: u16 = crate::abi::MP_MAX_STACK as u16;

/// The frames a perf-ring sample record can hold: a record's size is 16
/// bits (64 KiB with the header and the other fields), and with `--stacks
/// dwarf` the user stack copy shares it, so the kernel callchain is
/// bounded lower there (kernel stacks are short); and a session keeps
/// stacks of up to [`crate::parse::STACK_MAX`] frames.
pub const RING_MAX_FRAMES: u16 = 1000;

/// The deepest callchain to ask the perf core for: the
/// `kernel.perf_event_max_stack` sysctl (perf_event_open refuses a
/// `sample_max_stack` above it, EINVAL), up to what the sample path can
/// keep ([`BPF_MAX_FRAMES`] on the eBPF path, [`RING_MAX_FRAMES`] through
/// the perf ring).
pub(super) fn max_stack(ring_samples: bool) -> MaxStack {
    stack_limit(
        mantle_sys::probe::sysctl("perf_event_max_stack"),
        ring_samples,
    )
}

/// [`max_stack`] for a sysctl value (None: unreadable, the kernel's
/// default 127 assumed). Pure.
pub(super) fn stack_limit(sysctl: Option<i64>, ring_samples: bool) -> MaxStack {
    let ours = if ring_samples {
        RING_MAX_FRAMES
    } else {
        BPF_MAX_FRAMES
    };
    let limit = sysctl.unwrap_or(127).max(1);
    let depth = limit.min(ours as i64) as u16;
    let warning = (limit > ours as i64).then(|| {
        if ring_samples {
            format!(
                "kernel.perf_event_max_stack is {limit}: stacks are kept to {ours} frames (a perf sample record holds no more); deeper ones are cut there"
            )
        } else {
            format!(
                "kernel.perf_event_max_stack is {limit}: the eBPF sample path keeps {ours} frames per stack (its stack table's width); deeper stacks are cut there (--stacks dwarf, or recording without CAP_BPF, takes samples through the perf ring, up to {RING_MAX_FRAMES} frames)"
            )
        }
    });
    MaxStack { depth, warning }
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
    /// The callchain depth follows the sysctl up to what the path keeps,
    /// and says so when the sysctl allows deeper.
    #[test]
    fn stack_limit_follows_the_sysctl() {
        assert_eq!(stack_limit(Some(127), false).depth, 127);
        assert_eq!(stack_limit(Some(127), false).warning, None);
        assert_eq!(stack_limit(Some(40), false).depth, 40);
        assert_eq!(stack_limit(None, true).depth, 127);
        let deep = stack_limit(Some(600), false);
        assert_eq!(deep.depth, BPF_MAX_FRAMES);
        assert!(deep
            .warning
            .unwrap()
            .contains("perf_event_max_stack is 600"));
        let ring = stack_limit(Some(600), true);
        assert_eq!((ring.depth, ring.warning), (600, None));
        let huge = stack_limit(Some(100_000), true);
        const { assert!((RING_MAX_FRAMES as usize) < crate::parse::STACK_MAX) };
        assert_eq!(huge.depth, RING_MAX_FRAMES);
        assert!(huge.warning.is_some());
        assert_eq!(stack_limit(Some(0), true).depth, 1);
    }

    #[test]
    fn cpu_list() {
        assert_eq!(parse_cpu_list("0-1"), vec![0, 1]);
        assert_eq!(parse_cpu_list("0,2-3,7"), vec![0, 2, 3, 7]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert!(parse_cpu_list("").is_empty());
    }
}
