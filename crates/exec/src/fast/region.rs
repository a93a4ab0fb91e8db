//! The fast path's shared region on the executive's side: a memfd sized
//! for `nslots` slots ([`mantle_abi::exec`] draws the layout), mapped
//! `MAP_SHARED` here and, through the fd, in every guest process.
//!
//! `nslots` is a capacity (thousands by default): the memfd is sparse, so
//! a page of it is memory only once touched (the header, the slots below
//! the high-water mark, path buffers the executive wrote). The high-water
//! mark is the guest's word: [`Region::high_water`] bounds it by the
//! capacity before anything uses it as an index bound.
//!
//! Every access to the mapping is an atomic load or store of one aligned
//! word: the guest writes the same memory concurrently, so a plain read
//! would be a data race; an atomic read of garbage is just a wrong value.
//! Nothing the executive keeps lives here (its state is in
//! [`super::server`]).

use mantle_abi::exec::{self as abi, FastSlot};
use mantle_sys::shm::SharedMem;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::Acquire;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub(crate) use mantle_sys::shm::{futex_wait, futex_wake};

/// Byte offsets of the header words the executive touches.
pub(crate) mod hdr {
    pub const SPIN: usize = 28;
    pub const DOORBELL: usize = 32;
    pub const EXEC_SLEEPING: usize = 36;
    pub const OVERFLOW: usize = 40;
    pub const FLAGS: usize = 44;
    pub const HWM: usize = 192;
    pub const FREES: usize = 196;
    pub const EXEC_GONE: usize = 200;
    pub const COUNTED: usize = 208;
    const _: () = assert!(core::mem::offset_of!(mantle_abi::exec::FastHdr, counted) == COUNTED);
    const _: () = assert!(core::mem::offset_of!(mantle_abi::exec::FastHdr, hwm) == HWM);
    const _: () = assert!(core::mem::offset_of!(mantle_abi::exec::FastHdr, frees) == FREES);
    const _: () = assert!(core::mem::offset_of!(mantle_abi::exec::FastHdr, exec_gone) == EXEC_GONE);
}
/// Byte offsets inside a slot.
pub(crate) mod slot {
    pub const STATE: usize = 0;
    pub const TID: usize = 4;
    pub const SEQ: usize = 8;
    pub const NR: usize = 16;
    pub const FLAGS: usize = 20;
    pub const ARGS: usize = 24;
    pub const IP: usize = 72;
    pub const RESULT: usize = 80;
    pub const REPORT_SEQ: usize = 88;
    pub const REPORT_RESULT: usize = 96;
    pub const BASE: usize = 104;
    pub const T_TRAP: usize = 112;
    pub const WAITING: usize = 120;
    pub const GEN: usize = 124;
    const _: () = assert!(core::mem::offset_of!(mantle_abi::exec::FastSlot, gen) == GEN);
    const _: () = assert!(core::mem::offset_of!(mantle_abi::exec::FastSlot, t_trap) == T_TRAP);
}

/// The executive's mapping of the region.
pub struct Region {
    mem: SharedMem,
    nslots: usize,
}

impl Region {
    /// A new region with `nslots` slots (1..=[`abi::FAST_MAX_SLOTS`]), the header filled in:
    /// `wanted` call numbers (each < 1024), the guest's spin count, the
    /// fixed address of the stub's syscall page, this process as the
    /// executive.
    pub fn create(nslots: usize, wanted: &[u32], spin: u32, tramp: u64) -> io::Result<Region> {
        if nslots == 0 || nslots > abi::FAST_MAX_SLOTS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "slot count"));
        }
        let len = abi::region_size(nslots);
        let r = Region {
            mem: SharedMem::create(c"mantle-fast", len)?,
            nslots,
        };
        // before any guest has the fd: a guest that truncated the region
        // would make the executive's next access to it a SIGBUS
        r.mem.seal_size()?;
        let mut h = abi::FastHdr {
            magic: abi::FAST_MAGIC,
            version: abi::FAST_VERSION,
            nslots: nslots as u32,
            slot_size: abi::FAST_SLOT_SIZE as u32,
            region_size: len as u64,
            exec_pid: std::process::id(),
            spin,
            doorbell: 0,
            exec_sleeping: 0,
            overflow: 0,
            hdr_flags: 0,
            paths_off: abi::paths_off(nslots) as u64,
            tramp,
            wanted: [0; abi::WANT_WORDS],
            hwm: 0,
            frees: 0,
            exec_gone: 0,
            reserved: 0,
            counted: [0; abi::WANT_WORDS],
        };
        for &nr in wanted {
            if nr < abi::NR_MAX {
                h.wanted[(nr / 64) as usize] |= 1 << (nr % 64);
            }
        }
        use mantle_abi::IntoBytes;
        // no guest has the fd yet: nothing else writes the header
        if !r.mem.write_bytes(0, h.as_bytes()) {
            return Err(io::Error::other("the region header does not fit"));
        }
        Ok(r)
    }

    /// Sets or clears header flags (`HDR_*`), before the guest starts.
    pub fn set_flags(&self, flags: u32) {
        self.hdr32(hdr::FLAGS).store(flags, Ordering::SeqCst);
    }

    /// Sets the calls the stub counts itself (`counted`, each < 1024),
    /// before the guest starts.
    pub fn set_counted(&self, nrs: &[u32]) {
        let mut words = [0u64; abi::WANT_WORDS];
        for &nr in nrs.iter().filter(|&&n| n < abi::NR_MAX) {
            words[(nr / 64) as usize] |= 1 << (nr % 64);
        }
        for (k, w) in words.iter().enumerate() {
            self.u64_at(hdr::COUNTED + 8 * k)
                .store(*w, Ordering::SeqCst);
        }
    }

    /// The stub's counters of call `nr` (< 1024) as they are now: claims,
    /// each word read once (a guest may have written anything there).
    pub fn count_of(&self, nr: u32) -> abi::FastCount {
        if nr >= abi::NR_MAX {
            return abi::FastCount::default();
        }
        let off = abi::counts_off(self.nslots) + nr as usize * abi::FAST_COUNT_SIZE;
        let r = Ordering::Acquire;
        abi::FastCount {
            calls: self.u64_at(off).load(r),
            errors: self.u64_at(off + 8).load(r),
            ticks: self.u64_at(off + 16).load(r),
            timed: self.u64_at(off + 24).load(r),
        }
    }

    /// The guest's spin count as the header says now.
    pub fn guest_spin(&self) -> u32 {
        self.hdr32(hdr::SPIN).load(Ordering::Relaxed)
    }

    pub fn fd(&self) -> &OwnedFd {
        self.mem.fd()
    }
    pub fn nslots(&self) -> usize {
        self.nslots
    }

    /// Slots `[0, high_water)` were claimed at some time: the header's
    /// `hwm`, a guest's word, bounded by the capacity.
    pub fn high_water(&self) -> usize {
        (self.hdr32(hdr::HWM).load(Acquire) as usize).min(self.nslots)
    }

    /// Bytes of the region backed by memory now (the memfd is sparse).
    pub fn committed_bytes(&self) -> io::Result<u64> {
        self.mem.resident_bytes()
    }

    // Offsets are the layout's constants and slot indices below nslots:
    // always inside and aligned (mantle_abi::exec asserts the layout), so
    // a miss is a bug in this file, not guest input.
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.mem.u32(off).expect("a u32 of the region layout")
    }
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.mem.u64(off).expect("a u64 of the region layout")
    }

    pub(crate) fn hdr32(&self, off: usize) -> &AtomicU32 {
        self.u32_at(off)
    }
    pub(crate) fn s32(&self, i: usize, off: usize) -> &AtomicU32 {
        self.u32_at(abi::slots_off() + i * abi::FAST_SLOT_SIZE + off)
    }
    pub(crate) fn s64(&self, i: usize, off: usize) -> &AtomicU64 {
        self.u64_at(abi::slots_off() + i * abi::FAST_SLOT_SIZE + off)
    }
    /// Slot `i`'s (state, tid) word ([`abi::pair`]): a change of owner, and
    /// an answer, is one CAS of it. (The executive's one thread also reads
    /// `state` and `tid` as u32s; the guests' accesses are another
    /// process's, outside this program's memory model: the hardware
    /// orders them.)
    pub(crate) fn pair(&self, i: usize) -> &AtomicU64 {
        self.s64(i, slot::STATE)
    }

    /// A copy of slot `i` (each word read once; the copy is what gets
    /// validated, never the live memory).
    pub fn snapshot(&self, i: usize) -> FastSlot {
        use slot::*;
        let r = Ordering::Acquire;
        let mut args = [0u64; 6];
        for (k, a) in args.iter_mut().enumerate() {
            *a = self.s64(i, ARGS + 8 * k).load(r);
        }
        FastSlot {
            state: self.s32(i, STATE).load(r),
            tid: self.s32(i, TID).load(r),
            seq: self.s64(i, SEQ).load(r),
            nr: self.s32(i, NR).load(r),
            flags: self.s32(i, FLAGS).load(r),
            args,
            ip: self.s64(i, IP).load(r),
            result: self.s64(i, RESULT).load(r) as i64,
            report_seq: self.s64(i, REPORT_SEQ).load(r),
            report_result: self.s64(i, REPORT_RESULT).load(r) as i64,
            base: self.s64(i, BASE).load(r),
            t_trap: self.s64(i, T_TRAP).load(r),
            waiting: self.s32(i, WAITING).load(r),
            gen: self.s32(i, GEN).load(r),
        }
    }

    /// Writes `bytes` and a NUL into slot `i`'s path buffer; false if it
    /// does not fit.
    pub(crate) fn write_path(&self, i: usize, bytes: &[u8]) -> bool {
        if bytes.len() >= abi::FAST_PATH_SIZE || i >= self.nslots {
            return false;
        }
        let off = abi::paths_off(self.nslots) + i * abi::FAST_PATH_SIZE;
        self.mem.write_bytes(off, bytes) && self.mem.write_bytes(off + bytes.len(), &[0])
    }

    /// Offset of slot `i`'s path buffer in the region.
    pub(crate) fn path_off(&self, i: usize) -> u64 {
        (abi::paths_off(self.nslots) + i * abi::FAST_PATH_SIZE) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_slots_round_trip() {
        let r = Region::create(4, &[110, 2, 5000], 7, 0x10_0000_0000).unwrap();
        assert_eq!(r.guest_spin(), 7);
        r.s32(3, slot::TID).store(42, Ordering::Relaxed);
        r.s64(3, slot::ARGS + 8 * 5).store(9, Ordering::Relaxed);
        let s = r.snapshot(3);
        assert_eq!((s.tid, s.args[5], s.state), (42, 9, abi::ST_FREE));
        assert!(r.write_path(3, b"/tmp/x"));
        assert!(!r.write_path(3, &[b'a'; 4096]));
        assert!(Region::create(0, &[], 0, 0).is_err());
        r.set_counted(&[0, 110, 1023, 5000]);
        assert_eq!(r.count_of(110), abi::FastCount::default());
        assert_eq!(r.count_of(5000), abi::FastCount::default());
        let off = abi::counts_off(4) + 1023 * abi::FAST_COUNT_SIZE;
        r.u64_at(off).store(3, Ordering::Relaxed);
        r.u64_at(off + 16).store(7, Ordering::Relaxed);
        let c = r.count_of(1023);
        assert_eq!((c.calls, c.errors, c.ticks, c.timed), (3, 0, 7, 0));
        assert!(Region::create(abi::FAST_MAX_SLOTS + 1, &[], 0, 0).is_err());
    }

    #[test]
    fn the_high_water_mark_is_bounded_by_the_capacity() {
        let r = Region::create(8, &[], 0, 0).unwrap();
        assert_eq!(r.high_water(), 0);
        r.hdr32(hdr::HWM).store(3, Ordering::Relaxed);
        assert_eq!(r.high_water(), 3);
        r.hdr32(hdr::HWM).store(u32::MAX, Ordering::Relaxed); // a guest's lie
        assert_eq!(r.high_water(), 8);
        r.pair(2)
            .store(abi::pair(abi::ST_IDLE, 99), Ordering::Relaxed);
        let s = r.snapshot(2);
        assert_eq!((s.state, s.tid), (abi::ST_IDLE, 99));
    }

    /// Thousands of slots cost memory only where touched: a region of the
    /// largest capacity commits the header and the pages written.
    #[test]
    fn a_large_region_is_sparse() {
        let r = Region::create(abi::FAST_MAX_SLOTS, &[2], 0, 0).unwrap();
        let before = r.committed_bytes().unwrap();
        assert!(before <= 2 * 4096, "{before} bytes committed at creation");
        for i in 0..100 {
            r.pair(i)
                .store(abi::pair(abi::ST_IDLE, 1), Ordering::Relaxed);
        }
        assert!(r.write_path(abi::FAST_MAX_SLOTS - 1, b"/x"));
        let after = r.committed_bytes().unwrap();
        // 100 slots = 12800 bytes: 4 pages, one path buffer page, header
        assert!(after <= 6 * 4096, "{after} bytes committed");
    }
}
