//! The side band: a dummy perf event per CPU (and per thread for `-p`)
//! with mmap2/comm/task bits and its own ring, and the replay of its
//! records into [`AddressSpaces`].
//!
//! Mechanism: every record carries (pid, tid, time) at its end
//! (`sample_id_all`), so the records of all CPUs' rings are sorted by time
//! before they are applied: a fork seen on one CPU precedes the child's
//! exec on another. The sampling events' own output (throttle records) is
//! redirected into these rings too.
//!
//! Invariants: a record is input from the kernel's ring and is parsed with
//! checked offsets only; a record too short for its type is skipped and
//! counted as a lost side-band record, never a panic.

use crate::events;
use crate::kernel::{self, attr, PerfEventAttr, PerfRecord, PerfRing};
use crate::model::{AddressSpaces, Mapping};
use crate::Error;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

/// Data pages of each CPU's ring with `--stacks dwarf` and 8 KiB stack
/// copies: 4 MiB, about 500 samples, 50 ms of one CPU at 10 000 Hz (the
/// ring is read every [`DWARF_POLL_MS`]); larger copies, proportionally
/// more (a power of two).
pub(super) const DWARF_RING_PAGES: usize = 1024;
/// How often the rings are read with `--stacks dwarf`.
pub(super) const DWARF_POLL_MS: u64 = 20;

/// Data pages of each CPU's ring without sample records (the side band
/// alone): 1 MiB.
const SIDE_RING_PAGES: usize = 256;
/// Data pages of each CPU's ring when frame-pointer sample records travel
/// through it (no eBPF sample path): 1 MiB, about 2 000 records of 60
/// frames, 250 ms of one CPU at 4 000 Hz (read every [`DWARF_POLL_MS`]).
const CHAIN_RING_PAGES: usize = 256;
/// The fewest data pages a ring may have (perf's minimum is one; below
/// this a ring of samples overflows between two reads).
const MIN_RING_PAGES: usize = 8;

/// Data pages of each CPU's ring: for the side band alone, with
/// frame-pointer sample records (`ring_samples`), or with `--stacks dwarf`
/// stack copies of `stack_copy` bytes. An unprivileged recorder
/// (`limited`: no CAP_IPC_LOCK, CAP_PERFMON or CAP_SYS_ADMIN to lift the
/// limit) may pin `kernel.perf_event_mlock_kb` per CPU, plus its
/// RLIMIT_MEMLOCK (perf_mmap in kernel/events/core.c): the rings are
/// shrunk to fit (a power of two each, half the RLIMIT_MEMLOCK kept for
/// other uses), and refused when not even [`MIN_RING_PAGES`] fit.
pub(super) fn ring_pages(
    dwarf: bool,
    stack_copy: u32,
    ring_samples: bool,
    limited: bool,
    cpus: usize,
) -> Result<usize, Error> {
    let want = if dwarf {
        (DWARF_RING_PAGES * (stack_copy as usize).div_ceil(8192)).next_power_of_two()
    } else if ring_samples {
        CHAIN_RING_PAGES
    } else {
        SIDE_RING_PAGES
    };
    if !limited {
        return Ok(want);
    }
    let mlock_kb: Option<i64> = mantle_sys::probe::sysctl("perf_event_mlock_kb");
    fit_pages(
        want,
        mlock_kb.unwrap_or(516).max(0) as u64,
        mantle_sys::os::memlock_limit(),
        cpus,
        mantle_sys::os::page_size() as u64,
    )
}

/// [`ring_pages`] for an unprivileged recorder: the largest power of two
/// up to `want` whose ring (plus its header page) fits the per-CPU share
/// of `mlock_kb` KiB per CPU and half of `memlock` bytes (None:
/// unlimited). Pure.
pub(super) fn fit_pages(
    want: usize,
    mlock_kb: u64,
    memlock: Option<u64>,
    cpus: usize,
    page: u64,
) -> Result<usize, Error> {
    let cpus = cpus.max(1) as u64;
    let Some(memlock) = memlock else {
        return Ok(want);
    };
    let budget = mlock_kb.saturating_mul(1024) + memlock / 2 / cpus;
    let fit = (budget / page).saturating_sub(1);
    let mut pages = want;
    while pages as u64 > fit && pages > 1 {
        pages /= 2;
    }
    if pages < MIN_RING_PAGES.min(want) {
        return Err(Error::Permission(format!(
            "the perf rings need {} KiB per CPU and an unprivileged user may lock only kernel.perf_event_mlock_kb ({mlock_kb} KiB) per CPU plus RLIMIT_MEMLOCK ({} KiB): raise one of them, or record with CAP_IPC_LOCK",
            (MIN_RING_PAGES as u64 + 1) * page / 1024,
            memlock / 1024
        )));
    }
    Ok(pages)
}

/// Counters from the side band.
#[derive(Debug, Default, Clone)]
pub(super) struct SideStats {
    /// Records lost: PERF_RECORD_LOST counts, plus malformed records.
    pub lost: u64,
    pub throttle: u64,
    pub unthrottle: u64,
    pub lost_samples: u64,
    /// Times a ring's contents were found corrupted and its unread bytes
    /// dropped (mantle_sys::perf::PerfRing::corrupt, summed over CPUs).
    pub corrupt: u64,
}

/// The side-band events and their rings, one ring per CPU.
pub(super) struct SideBand {
    /// Events of further threads (`-p`), whose output goes to their CPU's
    /// ring. Declared first: dropped before the rings they write into.
    _extra: Vec<OwnedFd>,
    pub rings: HashMap<u32, PerfRing>,
    /// Reused buffer of records read and not yet applied.
    recs: Vec<PerfRecord>,
    pub stats: SideStats,
}

impl SideStats {
    /// The counts since `before` (a continuous recording's period).
    pub fn since(&self, before: &SideStats) -> SideStats {
        SideStats {
            lost: self.lost.saturating_sub(before.lost),
            throttle: self.throttle.saturating_sub(before.throttle),
            unthrottle: self.unthrottle.saturating_sub(before.unthrottle),
            lost_samples: self.lost_samples.saturating_sub(before.lost_samples),
            corrupt: self.corrupt.saturating_sub(before.corrupt),
        }
    }
}

impl SideBand {
    /// Opens the side band on every CPU of `cpus` for every task of `pids`
    /// (-1: system-wide). System-wide for -a; for a process or a command
    /// it follows that task tree only (`inherit`), as perf does, so the
    /// rest of the machine's activity costs nothing here.
    ///
    /// `pages`: data pages of each CPU's ring ([`ring_pages`]).
    /// `cgroup`: opened in cgroup mode on that directory (`pids` [-1]).
    /// `exclude_kernel`: the recorder may not see kernel mode (no
    /// CAP_PERFMON, `perf_event_paranoid` 2): perf_event_open refuses
    /// every event without it, the side band's included.
    pub fn open(
        cpus: &[u32],
        pids: &[i32],
        inherit: bool,
        pages: usize,
        exclude_kernel: bool,
        cgroup: Option<std::os::fd::BorrowedFd>,
    ) -> Result<SideBand, Error> {
        let mut rings: HashMap<u32, PerfRing> = HashMap::new();
        let mut extra: Vec<OwnedFd> = Vec::new();
        let side_attr = PerfEventAttr {
            type_: events::PERF_TYPE_SOFTWARE,
            config: kernel::PERF_COUNT_SW_DUMMY,
            sample_period: 1,
            // every record carries (pid, tid, time) at its end, so records of
            // different CPUs' rings can be replayed in time order
            sample_type: kernel::PERF_SAMPLE_TID | kernel::PERF_SAMPLE_TIME,
            flags: attr::MMAP
                | attr::MMAP2
                | attr::COMM
                | attr::COMM_EXEC
                | attr::TASK
                | attr::SAMPLE_ID_ALL
                | if inherit { attr::INHERIT } else { 0 }
                | if exclude_kernel {
                    attr::EXCLUDE_KERNEL
                } else {
                    0
                },
            // Not attr::BUILD_ID: on this kernel the MMAP_BUILD_ID misc bit it
            // sets leaks into other sessions' MMAP2 records (which carry
            // maj/min/ino), and a `perf record` running at the same time
            // aborts. Build IDs are read from the files instead (cached).
            ..Default::default()
        };
        for &cpu in cpus {
            for (n, &pid) in pids.iter().enumerate() {
                let opened = match cgroup {
                    // only the cgroup's tasks' mmaps, comms, forks, exits
                    Some(dir) => kernel::perf_event_open_cgroup(&side_attr, dir, cpu as i32),
                    None => kernel::perf_event_open(&side_attr, pid, cpu as i32),
                };
                let fd = match opened {
                    Ok(fd) => fd,
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) && n > 0 => continue,
                    Err(e) => {
                        return Err(Error::os(
                            format!("open the side-band event on CPU {cpu}"),
                            e,
                        ))
                    }
                };
                if let Some(r) = rings.get(&cpu) {
                    kernel::perf_set_output(fd.as_fd(), r.fd.as_fd()).map_err(|e| {
                        Error::os(format!("route side band of thread {pid} on CPU {cpu}"), e)
                    })?;
                    extra.push(fd);
                } else {
                    let ring = PerfRing::new(fd, pages).map_err(|e| {
                        Error::os(format!("mmap the side-band ring of CPU {cpu}"), e)
                    })?;
                    rings.insert(cpu, ring);
                }
            }
        }
        Ok(SideBand {
            _extra: extra,
            rings,
            recs: Vec::new(),
            stats: SideStats::default(),
        })
    }

    /// Reads every CPU's ring and applies the records in time order;
    /// sample records (`--stacks dwarf`) go to `on_sample` in their place
    /// in that order, so they meet the address space of their moment.
    pub fn replay(
        &mut self,
        sp: &mut AddressSpaces,
        on_sample: &mut dyn FnMut(&PerfRecord, &AddressSpaces),
    ) {
        replay(
            &mut self.rings,
            &mut self.recs,
            sp,
            &mut self.stats,
            on_sample,
        );
    }
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The u32 at offset `o` of a record body; None past its end.
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    let x: [u8; 4] = b.get(o..o.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_ne_bytes(x))
}

/// The u64 at offset `o` of a record body; None past its end.
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    let x: [u8; 8] = b.get(o..o.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_ne_bytes(x))
}

/// Applies one record (layouts: `enum perf_event_type` in
/// linux/perf_event.h). None when the record is too short for its type or
/// describes an impossible mapping: the caller counts it as lost.
fn apply_record(r: &PerfRecord, sp: &mut AddressSpaces, st: &mut SideStats) -> Option<()> {
    let b = &r.body;
    match r.type_ {
        kernel::PERF_RECORD_MMAP2 => {
            let (pid, start, len, pgoff) =
                (u32_at(b, 0)?, u64_at(b, 8)?, u64_at(b, 16)?, u64_at(b, 24)?);
            let path = cstr(b.get(64..)?);
            // The record's MMAP_BUILD_ID misc bit is not trusted: another
            // session's attr.build_id can make the kernel set it on records
            // that carry maj/min/ino (see the side-band attr above).
            // build IDs are read lazily, for images that get samples
            let build_id = None;
            sp.mmap(
                pid,
                Mapping {
                    start,
                    end: start.checked_add(len)?,
                    pgoff,
                    path,
                    build_id,
                },
            );
        }
        kernel::PERF_RECORD_COMM => {
            let exec = r.misc & kernel::PERF_RECORD_MISC_COMM_EXEC != 0;
            let (pid, tid) = (u32_at(b, 0)?, u32_at(b, 4)?);
            sp.comm(pid, tid, &cstr(b.get(8..)?), exec);
        }
        kernel::PERF_RECORD_FORK => sp.fork(u32_at(b, 0)?, u32_at(b, 4)?, u32_at(b, 8)?),
        kernel::PERF_RECORD_EXIT => sp.exit(u32_at(b, 0)?, u32_at(b, 8)?),
        kernel::PERF_RECORD_LOST => st.lost = st.lost.saturating_add(u64_at(b, 8)?),
        kernel::PERF_RECORD_THROTTLE => st.throttle += 1,
        kernel::PERF_RECORD_UNTHROTTLE => st.unthrottle += 1,
        kernel::PERF_RECORD_LOST_SAMPLES => {
            st.lost_samples = st.lost_samples.saturating_add(u64_at(b, 0)?)
        }
        _ => {}
    }
    Some(())
}

/// Time of a side-band record (the sample_id trailer's last u64); records
/// without a trailer (throttling, from the sampling events) sort first.
fn record_time(r: &PerfRecord) -> u64 {
    match r.type_ {
        kernel::PERF_RECORD_MMAP2
        | kernel::PERF_RECORD_COMM
        | kernel::PERF_RECORD_FORK
        | kernel::PERF_RECORD_EXIT
        | kernel::PERF_RECORD_LOST => r
            .body
            .len()
            .checked_sub(8)
            .and_then(|o| u64_at(&r.body, o))
            .unwrap_or(0),
        // ip, pid/tid, then time (crate::unwind::parse_sample)
        kernel::PERF_RECORD_SAMPLE => u64_at(&r.body, 16).unwrap_or(0),
        _ => 0,
    }
}

/// Reads every CPU's side-band ring and applies the records in time
/// order (a fork seen on one CPU precedes the child's exec on another).
fn replay(
    rings: &mut HashMap<u32, PerfRing>,
    recs: &mut Vec<PerfRecord>,
    sp: &mut AddressSpaces,
    side: &mut SideStats,
    on_sample: &mut dyn FnMut(&PerfRecord, &AddressSpaces),
) {
    for r in rings.values_mut() {
        r.read(recs);
    }
    side.corrupt = rings.values().map(|r| r.corrupt()).sum();
    recs.sort_by_key(record_time);
    let trace = std::env::var_os("MANTLE_PROF_TRACE").is_some();
    for r in recs.drain(..) {
        if trace {
            eprintln!(
                "sideband t={} type={} misc={:#x} pid={} {:?}",
                record_time(&r),
                r.type_,
                r.misc,
                u32_at(&r.body, 0).unwrap_or(0),
                String::from_utf8_lossy(r.body.get(8..).unwrap_or(&[])).trim_matches('\0')
            );
        }
        if r.type_ == kernel::PERF_RECORD_SAMPLE {
            on_sample(&r, sp);
        } else if apply_record(&r, sp, side).is_none() {
            side.lost = side.lost.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(type_: u32, body: Vec<u8>) -> PerfRecord {
        PerfRecord {
            type_,
            misc: 0,
            body,
        }
    }

    /// Records shorter than their type's layout are skipped and counted
    /// as lost; nothing panics and no mapping is invented.
    #[test]
    fn short_records_are_lost_not_panics() {
        let mut sp = AddressSpaces::new(vec![]);
        let mut st = SideStats::default();
        let mut skipped = 0;
        for t in [
            kernel::PERF_RECORD_MMAP2,
            kernel::PERF_RECORD_COMM,
            kernel::PERF_RECORD_FORK,
            kernel::PERF_RECORD_EXIT,
            kernel::PERF_RECORD_LOST,
            kernel::PERF_RECORD_LOST_SAMPLES,
        ] {
            for len in [0, 3, 7, 12, 40, 63] {
                let r = rec(t, vec![0xff; len]);
                let _ = record_time(&r);
                if apply_record(&r, &mut sp, &mut st).is_none() {
                    skipped += 1;
                }
            }
        }
        assert!(sp.history.is_empty());
        // MMAP2 needs 64 bytes (all 6 skipped), COMM 8, FORK and EXIT 12
        // (3 each), LOST 16 (4), LOST_SAMPLES 8 (3); the counts that were
        // long enough are all ones and saturate
        assert_eq!(skipped, 6 + 3 + 3 + 3 + 4 + 3);
        assert_eq!((st.lost, st.lost_samples), (u64::MAX, u64::MAX));
    }

    /// `--stacks dwarf` sample records sort by their own time (the third
    /// u64: ip, pid/tid, time) among the side band's records, so each is
    /// unwound against the mappings announced before it.
    #[test]
    fn samples_sort_by_their_time() {
        let mut body = vec![0u8; 40];
        body[16..24].copy_from_slice(&77u64.to_ne_bytes());
        assert_eq!(record_time(&rec(kernel::PERF_RECORD_SAMPLE, body)), 77);
        // too short for a time: first, and never a panic
        assert_eq!(
            record_time(&rec(kernel::PERF_RECORD_SAMPLE, vec![0; 20])),
            0
        );
        let mut mmap = vec![0u8; 80];
        let n = mmap.len();
        mmap[n - 8..].copy_from_slice(&78u64.to_ne_bytes());
        let mut v = [
            rec(kernel::PERF_RECORD_MMAP2, mmap),
            rec(kernel::PERF_RECORD_SAMPLE, {
                let mut b = vec![0u8; 40];
                b[16..24].copy_from_slice(&77u64.to_ne_bytes());
                b
            }),
        ];
        v.sort_by_key(record_time);
        assert_eq!(v[0].type_, kernel::PERF_RECORD_SAMPLE);
    }

    /// Unprivileged rings fit what the kernel lets a user lock: 516 KiB per
    /// CPU plus half of RLIMIT_MEMLOCK, as a power of two; unlimited
    /// memlock keeps what was wanted; nothing that fits is refused.
    #[test]
    fn unprivileged_rings_fit_the_mlock_limit() {
        let p = 4096;
        // 516 KiB + 4 MiB / 2 CPUs = 2564 KiB: 640 pages, less the header
        assert_eq!(fit_pages(1024, 516, Some(8 << 20), 2, p).unwrap(), 512);
        assert_eq!(fit_pages(256, 516, Some(8 << 20), 2, p).unwrap(), 256);
        // no RLIMIT_MEMLOCK to speak of: perf's 128 pages + header
        assert_eq!(fit_pages(1024, 516, Some(0), 64, p).unwrap(), 128);
        assert_eq!(fit_pages(1024, 516, None, 64, p).unwrap(), 1024);
        let e = fit_pages(256, 4, Some(0), 2, p).unwrap_err().to_string();
        assert!(e.contains("perf_event_mlock_kb (4 KiB)"), "{e}");
    }

    /// An MMAP2 whose start + len wraps is refused.
    #[test]
    fn wrapping_mapping_is_refused() {
        let mut b = vec![0u8; 72];
        b[0..4].copy_from_slice(&7u32.to_ne_bytes());
        b[8..16].copy_from_slice(&u64::MAX.to_ne_bytes());
        b[16..24].copy_from_slice(&2u64.to_ne_bytes());
        b[64..67].copy_from_slice(b"/x\0");
        let mut sp = AddressSpaces::new(vec![]);
        let mut st = SideStats::default();
        assert!(
            apply_record(&rec(kernel::PERF_RECORD_MMAP2, b.clone()), &mut sp, &mut st).is_none()
        );
        b[8..16].copy_from_slice(&0x1000u64.to_ne_bytes());
        assert!(apply_record(&rec(kernel::PERF_RECORD_MMAP2, b), &mut sp, &mut st).is_some());
        assert_eq!(sp.history[0].1.path, "/x");
        assert_eq!(sp.history[0].1.end, 0x1002);
    }
}
