//! A component's invocation region (layout: mantle_abi::comp): the header
//! with the freelist head and relinquish bit, and one slot per execution
//! context. Mapped by the manager, the server and its allowed clients.
//!
//! The freelist is a Treiber stack of slot indices whose head carries a
//! generation (`gen << 32 | idx+1`) so that a pop racing a pop-push-push
//! cannot install a stale `next` (ABA). Anybody may pop (an invoking
//! client, the manager removing a context) and push (a client returning a
//! context, the manager adding one): a context on the list is by
//! definition not in use, so the manager's removal never takes one in use.
//!
//! Everything read from the region is a claim (other processes write it):
//! an index out of range is [`Error::Corrupt`], never a panic.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64};

use mantle_abi::comp::*;
use mantle_sys::shm::SharedMem;

use crate::Error;

pub struct Region {
    mem: SharedMem,
    nctx: u32,
}

impl Region {
    /// A new region of `nctx` parked contexts (the manager's side).
    pub fn create(name: &str, nctx: u32) -> Result<Region, Error> {
        if nctx == 0 || nctx > MAX_CTX {
            return Err(Error::Spec(format!(
                "{nctx} contexts: must be 1 to {MAX_CTX}"
            )));
        }
        let cname = std::ffi::CString::new(format!("mantle-comp-{name}"))
            .map_err(|_| Error::Spec(format!("bad name {name:?}")))?;
        let mem = SharedMem::create(&cname, region_len(nctx)).map_err(Error::sys("memfd"))?;
        // Every client maps the region read-write from this memfd: sealed,
        // none of them can shrink it under the others (SIGBUS).
        mem.seal_size().map_err(Error::sys("seal region"))?;
        let r = Region { mem, nctx };
        r.h32(HDR_VERSION).store(ABI_VERSION, Relaxed);
        r.h32(HDR_NCTX).store(nctx, Relaxed);
        r.h32(HDR_MAGIC).store(REGION_MAGIC, Release);
        Ok(r)
    }

    /// Maps a region received from the manager and checks its header.
    pub fn attach(fd: OwnedFd) -> Result<Region, Error> {
        let len = std::fs::File::from(fd.try_clone().map_err(Error::sys("dup"))?)
            .metadata()
            .map_err(Error::sys("fstat"))?
            .len() as usize;
        if len < region_len(0)
            || len > region_len(MAX_CTX)
            || !(len - region_len(0)).is_multiple_of(CTX_SIZE)
        {
            return Err(Error::Corrupt(format!("region of {len} bytes")));
        }
        let mem = SharedMem::map(fd, len).map_err(Error::sys("mmap region"))?;
        let nctx = ((len - region_len(0)) / CTX_SIZE) as u32;
        let r = Region { mem, nctx };
        let (m, v, n) = (
            r.h32(HDR_MAGIC).load(Acquire),
            r.h32(HDR_VERSION).load(Relaxed),
            r.h32(HDR_NCTX).load(Relaxed),
        );
        if m != REGION_MAGIC || v != ABI_VERSION || n != nctx {
            return Err(Error::Corrupt(format!(
                "region header magic {m:#x} version {v} nctx {n} (size says {nctx})"
            )));
        }
        Ok(r)
    }

    pub fn fd(&self) -> &OwnedFd {
        self.mem.fd()
    }

    pub fn nctx(&self) -> u32 {
        self.nctx
    }

    pub(crate) fn h32(&self, off: usize) -> &AtomicU32 {
        // HDR offsets are constants inside the header (checked in abi).
        self.mem.u32(off).expect("header offset inside the region")
    }

    pub(crate) fn h64(&self, off: usize) -> &AtomicU64 {
        self.mem.u64(off).expect("header offset inside the region")
    }

    /// Word `off` of slot `i`; `i` must be < nctx (checked by callers
    /// through [`Region::index`]).
    pub(crate) fn s32(&self, i: u32, off: usize) -> &AtomicU32 {
        self.mem
            .u32(slot_off(i) + off)
            .expect("slot index checked against nctx")
    }

    pub(crate) fn s64(&self, i: u32, off: usize) -> &AtomicU64 {
        self.mem
            .u64(slot_off(i) + off)
            .expect("slot index checked against nctx")
    }

    /// A link value from shared memory (idx+1, 0 = none) as an index.
    fn index(&self, link: u32) -> Result<Option<u32>, Error> {
        match link {
            0 => Ok(None),
            l if l <= self.nctx => Ok(Some(l - 1)),
            l => Err(Error::Corrupt(format!("freelist link {l} > {}", self.nctx))),
        }
    }

    /// Takes a free context off the freelist, lock-free. The slot is then
    /// ours alone (marked BUSY).
    pub fn pop(&self) -> Result<Option<u32>, Error> {
        let head = self.h64(HDR_FREE_HEAD);
        let mut h = head.load(Acquire);
        loop {
            let Some(i) = self.index(h as u32)? else {
                return Ok(None);
            };
            let next = self.s32(i, CTX_NEXT).load(Relaxed);
            let new = ((h >> 32).wrapping_add(1) << 32) | next as u64;
            match head.compare_exchange_weak(h, new, AcqRel, Acquire) {
                Ok(_) => {
                    self.s32(i, CTX_OWN).store(OWN_BUSY, Relaxed);
                    return Ok(Some(i));
                }
                Err(cur) => h = cur,
            }
        }
    }

    /// Returns context `i` to the freelist.
    pub fn push(&self, i: u32) {
        debug_assert!(i < self.nctx);
        self.s32(i, CTX_OWN).store(OWN_FREE, Relaxed);
        let head = self.h64(HDR_FREE_HEAD);
        let mut h = head.load(Relaxed);
        loop {
            self.s32(i, CTX_NEXT).store(h as u32, Relaxed);
            let new = ((h >> 32).wrapping_add(1) << 32) | (i as u64 + 1);
            match head.compare_exchange_weak(h, new, Release, Relaxed) {
                Ok(_) => return,
                Err(cur) => h = cur,
            }
        }
    }

    /// The thread id of context `i` (0 before it started), as the
    /// component wrote it: a claim.
    pub fn context_tid(&self, i: u32) -> Option<u32> {
        (i < self.nctx).then(|| self.s32(i, CTX_TID).load(Acquire))
    }

    /// Threads blocked in tmem_get on this component now.
    pub fn waiters(&self) -> u32 {
        self.h32(HDR_WAITERS).load(Acquire)
    }

    pub fn dead(&self) -> bool {
        self.h32(HDR_DEAD).load(Acquire) != 0
    }

    pub fn server_pid(&self) -> u32 {
        self.h32(HDR_SERVER_PID).load(Relaxed)
    }

    /// The instance of the server (bumped at each restart).
    pub fn epoch(&self) -> u32 {
        self.h32(HDR_EPOCH).load(Acquire)
    }

    /// A thread of a client blocked `ns` in tmem_get on this region.
    pub(crate) fn record_block(&self, tid: u32, ns: u64) {
        crate::blocks::record(&self.mem, region_blk_off(self.nctx), tid, ns);
    }

    /// Whether blocked callers wait without lending their priority (the
    /// policy's "w/o PI" variants; the manager sets it).
    pub fn nopi(&self) -> bool {
        self.h32(HDR_NOPI).load(Acquire) != 0
    }

    /// Per-thread block statistics, cumulative (Table II).
    pub fn thread_blocks(&self) -> Vec<crate::policy::ThreadBlock> {
        crate::blocks::read(&self.mem, region_blk_off(self.nctx))
    }

    /// Counts the contexts whose used bit is set and clears the bits (the
    /// manager's policy run).
    pub(crate) fn take_used(&self) -> u32 {
        (0..self.nctx)
            .filter(|&i| self.s32(i, CTX_USED).swap(0, AcqRel) != 0)
            .count() as u32
    }

    /// Makes a dead region new for a restarted server (the manager): the
    /// epoch moves on (callers of the old instance get an error), every
    /// context is parked without a thread, the freelist is empty, and the
    /// block table is cleared. The caller has reaped the old server and
    /// waited for its callers to leave.
    pub(crate) fn reset(&self) {
        self.h32(HDR_EPOCH).fetch_add(1, AcqRel);
        self.h64(HDR_FREE_HEAD).store(0, Release);
        for i in 0..self.nctx {
            for off in [
                CTX_PI,
                CTX_TID,
                CTX_NEXT,
                CTX_USED,
                CTX_CALLER_PID,
                CTX_HOLD_PI,
            ] {
                self.s32(i, off).store(0, Relaxed);
            }
            self.s32(i, CTX_OWN).store(OWN_PARKED, Relaxed);
            self.s32(i, CTX_CALL).store(CALL_IDLE, Release);
        }
        crate::blocks::clear(&self.mem, region_blk_off(self.nctx));
        for off in [HDR_ALLOCATED, HDR_READY, HDR_SERVER_PID, HDR_BLOCKS] {
            self.h32(off).store(0, Relaxed);
        }
        self.h64(HDR_BLOCK_NS).store(0, Relaxed);
        self.h32(HDR_DEAD).store(0, Release);
    }

    /// Counters of the header, for status.
    pub fn counters(&self) -> RegionCounters {
        let mut busy = 0;
        let mut free = 0;
        for i in 0..self.nctx {
            match self.s32(i, CTX_OWN).load(Relaxed) {
                OWN_BUSY => busy += 1,
                OWN_FREE => free += 1,
                _ => {}
            }
        }
        RegionCounters {
            nctx: self.nctx,
            allocated: self.h32(HDR_ALLOCATED).load(Relaxed),
            desired: self.h32(HDR_DESIRED).load(Relaxed),
            busy,
            free,
            waiters: self.h32(HDR_WAITERS).load(Relaxed),
            relinquish: self.h32(HDR_RELINQUISH).load(Relaxed),
            blocks: self.h32(HDR_BLOCKS).load(Relaxed),
            block_ns: self.h64(HDR_BLOCK_NS).load(Relaxed),
            ready: self.h32(HDR_READY).load(Relaxed),
            dead: self.dead(),
            epoch: self.epoch(),
            trims: self.h32(HDR_TRIMS).load(Relaxed),
            threads: self.thread_blocks(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RegionCounters {
    pub nctx: u32,
    pub allocated: u32,
    pub desired: u32,
    pub busy: u32,
    pub free: u32,
    pub waiters: u32,
    pub relinquish: u32,
    pub blocks: u32,
    pub block_ns: u64,
    pub ready: u32,
    pub dead: bool,
    /// Restarts of the server so far.
    pub epoch: u32,
    /// Times a context out of the cache gave its stack pages back to the
    /// kernel (written by the component: a claim, for status only).
    pub trims: u32,
    /// Per-thread block count and time on this cache, cumulative.
    pub threads: Vec<crate::policy::ThreadBlock>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pushed_context_pops_once_and_corruption_is_an_error() {
        for n in [1, 2, 7, MAX_CTX] {
            let r = Region::create("t", n).unwrap();
            assert_eq!(r.pop().unwrap(), None);
            for i in 0..n {
                r.push(i);
            }
            let mut got: Vec<u32> = std::iter::from_fn(|| r.pop().unwrap()).collect();
            got.sort();
            assert_eq!(got, (0..n).collect::<Vec<_>>());
            r.h64(HDR_FREE_HEAD).store(n as u64 + 1, Relaxed);
            assert!(matches!(r.pop(), Err(Error::Corrupt(_))));
        }
    }

    #[test]
    fn concurrent_pops_and_pushes_never_share_a_context() {
        let r = std::sync::Arc::new(Region::create("t", 8).unwrap());
        for i in 0..8 {
            r.push(i);
        }
        let owners: std::sync::Arc<Vec<AtomicU32>> =
            std::sync::Arc::new((0..8).map(|_| AtomicU32::new(0)).collect());
        let ts: Vec<_> = (0..4)
            .map(|t| {
                let (r, owners) = (r.clone(), owners.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        if let Some(i) = r.pop().unwrap() {
                            let o = &owners[i as usize];
                            assert_eq!(o.swap(t + 1, AcqRel), 0, "context {i} taken twice");
                            o.store(0, Release);
                            r.push(i);
                        }
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(std::iter::from_fn(|| r.pop().unwrap()).count(), 8);
    }
}
