//! CBUFs (TMEM paper §IV-D, Figure 5, Table I): shared buffers passed
//! between components by id, cached per component in slabs.
//!
//! A slab is two memfds made by the CBUF manager: the data (`SLAB_OBJS`
//! buffers of one size class) and the metadata (one `CbufMeta` per
//! buffer: state and generation, PI word, holder, since), so a component
//! writing its buffers cannot reach the metadata. The owner maps both
//! read-write; a component a cbid is passed to maps the data read-write
//! and the metadata read-only (the manager hands it an O_RDONLY fd).
//!
//! * `cbuf_alloc` pops a buffer from the per-class cache and claims it
//!   with one CAS FREE→ALLOC on its metadata word (the manager's reclaim
//!   CASes FREE→REVOKED, so the two never both win); the cache's
//!   bookkeeping is process-local, off the buffer pages.
//! * `cbuf_free(ptr)` finds the slab by address (the second index of
//!   §IV-D, a sorted table), bumps the generation (a freed cbid no longer
//!   matches), releases the PI word, and calls `tmem_put` if the
//!   relinquish bit is set.
//! * `cbuf2buf(cbid, size)` looks the slab up in the component's 2-level
//!   radix table (shared with the manager, which alone writes it); on a
//!   miss it asks the manager to map the slab, which refuses unless the
//!   slab is live and its owner may (transitively) invoke the asker. The
//!   generation and state in the metadata must match: a freed, forged or
//!   out-of-range cbid is an error.
//! * The empty-cache path asks the manager for a slab; past the
//!   component's limit it blocks with PI on a holder's word (as stacks).
//!
//! The manager's side ([`CbufManager`]) serves those requests on a
//! SOCK_SEQPACKET socket per component and reclaims free slabs
//! asynchronously: revoke every buffer (CAS), clear the slab from every
//! radix table it was mapped into, punch the data memfd's hole (the
//! memory goes back to the system), and close its memfds; slab numbers
//! are never reused, so a stale mapping can never alias a new slab.
//!
//! Lock order: `Cbufs::free[class]` then nothing; the manager's state
//! mutex is never held across a blocking call other than a send.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Duration;

use mantle_abi::comp::*;
use mantle_sys::os::{read_exact_raw, write_all_raw};
use mantle_sys::pifutex;
use mantle_sys::shm::{futex_wait, SharedMem};

use crate::Error;

const OP_NEW_SLAB: u32 = 1;
const OP_MAP: u32 = 2;

/// The size class of `size` bytes (smallest power of two ≥ CB_MIN).
pub fn class_of(size: usize) -> Option<usize> {
    (0..CB_CLASSES)
        .find(|&k| size <= CB_MIN << k)
        .filter(|_| size > 0)
}

pub fn class_size(k: usize) -> usize {
    CB_MIN << k
}

fn table_word(t: &SharedMem, off: usize) -> &AtomicU32 {
    t.u32(off)
        .expect("table offsets are constants inside the table")
}

/// The radix lookup: is `slab` mapped in this table? (two loads)
fn radix_get(t: &SharedMem, slab: u32) -> bool {
    let l1 = table_word(t, CBT_L1 + 4 * (slab as usize / CB_L2)).load(Acquire);
    if l1 == 0 || l1 as usize > CB_LEAVES {
        return false;
    }
    let off = CBT_LEAVES + ((l1 as usize - 1) * CB_L2 + slab as usize % CB_L2) * 4;
    table_word(t, off).load(Acquire) == 1
}

/// Sets or clears `slab` in a table (manager only); false when the table
/// has no leaf left.
fn radix_set(t: &SharedMem, slab: u32, on: bool) -> bool {
    let i1 = CBT_L1 + 4 * (slab as usize / CB_L2);
    let mut l1 = table_word(t, i1).load(Acquire);
    if l1 == 0 {
        if !on {
            return true;
        }
        let used: Vec<u32> = (0..CB_L1)
            .map(|k| table_word(t, CBT_L1 + 4 * k).load(Relaxed))
            .collect();
        let Some(free) = (1..=CB_LEAVES as u32).find(|n| !used.contains(n)) else {
            return false;
        };
        table_word(t, i1).store(free, Release);
        l1 = free;
    }
    let off = CBT_LEAVES + ((l1 as usize - 1) * CB_L2 + slab as usize % CB_L2) * 4;
    table_word(t, off).store(on as u32, Release);
    true
}

struct Slab {
    data: SharedMem,
    meta: SharedMem,
    class: usize,
    /// Ours (allocated here, metadata writable) or passed to us.
    owned: bool,
}

impl Slab {
    fn word(&self, obj: u32, off: usize) -> &AtomicU32 {
        self.meta
            .u32(obj as usize * CBM_SIZE + off)
            .expect("obj < SLAB_OBJS")
    }
    fn ptr(&self, obj: u32) -> *mut u8 {
        self.data
            .base()
            .wrapping_add(obj as usize * class_size(self.class))
    }
}

/// A component's CBUF cache (the client side of Table I).
pub struct Cbufs {
    /// The request socket. Taken only under `req_pi` (so never contended):
    /// the Mutex is for `Sync`.
    sock: Mutex<OwnedFd>,
    /// A process-private PI word around a request: a real-time thread
    /// that finds another thread of the component mid-request boosts it
    /// (and, through the table's `svc_pi`, the manager's service thread
    /// it waits on), where a plain mutex left it behind a lower-priority
    /// requester. Taken with `take_pi` (bounded tries: a word left by a
    /// thread that died is taken over, failing that the request goes on
    /// unboosted); exclusion itself is `sock`'s Mutex.
    req_pi: AtomicU32,
    table: SharedMem,
    slabs: Box<[OnceLock<Slab>]>,
    /// Per class: free buffers as `slab << SLAB_SHIFT | obj`.
    free: Vec<Mutex<Vec<u32>>>,
    /// (data base address, data length, slab), sorted: ptr → slab.
    by_addr: RwLock<Vec<(usize, usize, u32)>>,
}

/// Takes a buffer's PI word for its new holder: a CAS from 0, or, while
/// the previous holder is between its free and its unlock, FUTEX_LOCK_PI
/// (boosting it through that last step). A few tries only: a word left
/// by a thread that died is taken over; failing that, the buffer is held
/// without a PI word (a blocked allocator then waits for another holder).
fn take_pi(w: &AtomicU32, tid: u32) {
    for _ in 0..8 {
        let cur = match w.compare_exchange(0, tid, AcqRel, Relaxed) {
            Ok(_) => return,
            Err(cur) => cur,
        };
        match pifutex::lock_pi(w, Some(Duration::from_millis(20))) {
            Ok(true) => return,
            Err(e)
                if e.raw_os_error() == Some(libc::ESRCH)
                    && w.compare_exchange(cur, tid, AcqRel, Relaxed).is_ok() =>
            {
                return
            }
            _ => {}
        }
    }
}

fn now_ms() -> u32 {
    (pifutex::monotonic_ns() / 1_000_000) as u32
}

impl Cbufs {
    /// From the manager's socket and the component's table memfd.
    pub fn new(sock: OwnedFd, table: OwnedFd) -> Result<Cbufs, Error> {
        let table = SharedMem::map(table, CBUF_TABLE_LEN).map_err(Error::sys("map cbuf table"))?;
        if table_word(&table, 0).load(Acquire) != CBUF_MAGIC
            || table_word(&table, 4).load(Relaxed) != ABI_VERSION
        {
            return Err(Error::Corrupt("cbuf table header".into()));
        }
        Ok(Cbufs {
            sock: Mutex::new(sock),
            req_pi: AtomicU32::new(0),
            table,
            slabs: (0..MAX_SLABS).map(|_| OnceLock::new()).collect(),
            free: (0..CB_CLASSES).map(|_| Mutex::new(Vec::new())).collect(),
            by_addr: RwLock::new(Vec::new()),
        })
    }

    fn request(&self, op: u32, arg: u32) -> Result<(u32, Option<(OwnedFd, OwnedFd)>), Error> {
        let me = crate::runtime::my_tid();
        take_pi(&self.req_pi, me);
        let r = self.request_locked(op, arg);
        let _ = pifutex::unlock_pi(&self.req_pi, me);
        r
    }

    /// One request and its reply, at the requester's priority: the
    /// requester hands the table's `svc_pi` word to the manager's service
    /// thread (its tid in the word) and blocks on it with FUTEX_LOCK_PI,
    /// so the kernel runs the service thread at the requester's priority
    /// (a SCHED_OTHER service thread behind a middle-priority task, or
    /// behind the kernel's throttling of starved SCHED_OTHER work, kept a
    /// real-time requester waiting for as long as those ran). The service
    /// thread releases the word after the whole reply; the requester then
    /// drops it and reads the reply.
    fn request_locked(
        &self,
        op: u32,
        arg: u32,
    ) -> Result<(u32, Option<(OwnedFd, OwnedFd)>), Error> {
        let sock = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        let svc = table_word(&self.table, CBT_SVC_TID).load(Acquire) & pifutex::FUTEX_TID_MASK;
        let word = table_word(&self.table, CBT_SVC_PI);
        if svc != 0 {
            word.store(svc, Release);
        }
        let mut m = [0u8; 8];
        m[..4].copy_from_slice(&op.to_ne_bytes());
        m[4..].copy_from_slice(&arg.to_ne_bytes());
        write_all_raw(sock.as_fd(), &m).map_err(Error::sys("cbuf request"))?;
        if svc != 0 {
            let me = crate::runtime::my_tid();
            loop {
                match pifutex::lock_pi(word, Some(Duration::from_millis(100))) {
                    // the reply is complete: give the word back
                    Ok(true) => {
                        let _ = pifutex::unlock_pi(word, me);
                        break;
                    }
                    // still serving (or queued behind other components'
                    // requests): keep lending our priority
                    Ok(false) => continue,
                    // the service thread is gone (ESRCH) or the word was
                    // not what we stored: read the reply unboosted
                    Err(_) => break,
                }
            }
        }
        let mut r = [0u8; 8];
        read_exact_raw(sock.as_fd(), &mut r).map_err(Error::sys("cbuf reply"))?;
        let status = i32::from_ne_bytes(r[..4].try_into().unwrap_or_default());
        let val = u32::from_ne_bytes(r[4..].try_into().unwrap_or_default());
        if status != 0 {
            return Err(Error::Cbuf(status));
        }
        let data = mantle_sys::supervise::recv_fd(sock.as_fd()).map_err(Error::sys("cbuf fd"))?;
        let meta = mantle_sys::supervise::recv_fd(sock.as_fd()).map_err(Error::sys("cbuf fd"))?;
        Ok((val, Some((data, meta))))
    }

    fn install(
        &self,
        slab: u32,
        class: usize,
        data: OwnedFd,
        meta: OwnedFd,
        owned: bool,
    ) -> Result<&Slab, Error> {
        let len = SLAB_OBJS * class_size(class);
        let s = Slab {
            data: SharedMem::map(data, len).map_err(Error::sys("map slab"))?,
            meta: if owned {
                SharedMem::map(meta, CBUF_META_LEN).map_err(Error::sys("map cbuf meta"))?
            } else {
                SharedMem::map_readonly(meta, CBUF_META_LEN).map_err(Error::sys("map cbuf meta"))?
            },
            class,
            owned,
        };
        let base = s.data.base() as usize;
        let slot = &self.slabs[slab as usize];
        if slot.set(s).is_ok() {
            let mut v = self.by_addr.write().unwrap_or_else(|e| e.into_inner());
            let at = v.partition_point(|e| e.0 < base);
            v.insert(at, (base, len, slab));
        }
        slot.get().ok_or_else(|| Error::Corrupt("slab slot".into()))
    }

    /// `cbuf_alloc(size, &cbid)`: a buffer of at least `size` bytes.
    pub fn alloc(&self, size: usize) -> Result<(*mut u8, CbufId), Error> {
        let class = class_of(size).ok_or(Error::Cbuf(libc::EINVAL))?;
        let tid = crate::runtime::my_tid();
        loop {
            let key = self.free[class]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop();
            let Some(key) = key else {
                self.grow(class)?;
                continue;
            };
            let (slab, obj) = (key >> SLAB_SHIFT, key & (SLAB_OBJS as u32 - 1));
            let Some(s) = self.slabs[slab as usize].get() else {
                continue;
            };
            let w = s.word(obj, CBM_STATE_GEN);
            let v = w.load(Acquire);
            if v & CB_STATE_MASK != CB_FREE
                || w.compare_exchange(v, (v & !CB_STATE_MASK) | CB_ALLOC, AcqRel, Acquire)
                    .is_err()
            {
                continue; // revoked by the manager: drop it from the cache
            }
            // the used bit rides on the holder word (tids fit 22 bits)
            s.word(obj, CBM_HOLDER).store(tid | CBM_USED, Relaxed);
            s.word(obj, CBM_SINCE).store(now_ms(), Relaxed);
            take_pi(s.word(obj, CBM_PI), tid);
            return Ok((s.ptr(obj), CbufId::new(v >> 2, slab, obj)));
        }
    }

    /// The empty-cache path: a new slab from the manager, or, past the
    /// component's limit, PI on a holder until a buffer is freed.
    fn grow(&self, class: usize) -> Result<(), Error> {
        // a slab that cannot fit under δ^j (as the manager last published
        // it): straight to the wait, with no round trip to the manager,
        // whose thread may not get the CPU while a middle-priority task
        // runs (the manager checks again on every request)
        let limit = self
            .table
            .u64(CBT_LIMIT)
            .map_or(u64::MAX, |w| w.load(Acquire));
        let bytes = self.table.u64(CBT_BYTES).map_or(0, |w| w.load(Acquire));
        let len = (SLAB_OBJS * class_size(class)) as u64;
        if bytes.saturating_add(len) > limit {
            return self.tmem_get(class);
        }
        match self.request(OP_NEW_SLAB, class as u32) {
            Ok((slab, Some((data, meta)))) => {
                if slab == 0 || slab >= MAX_SLABS {
                    return Err(Error::Corrupt(format!("slab {slab} from the manager")));
                }
                self.install(slab, class, data, meta, true)?;
                let mut f = self.free[class].lock().unwrap_or_else(|e| e.into_inner());
                f.extend((0..SLAB_OBJS as u32).rev().map(|o| slab << SLAB_SHIFT | o));
                Ok(())
            }
            Err(Error::Cbuf(libc::ENOMEM)) => self.tmem_get(class),
            Err(e) => Err(e),
            Ok(_) => Err(Error::Corrupt("reply without fds".into())),
        }
    }

    fn tmem_get(&self, class: usize) -> Result<(), Error> {
        let t = &self.table;
        let t0 = pifutex::monotonic_ns();
        table_word(t, CBT_WAITERS).fetch_add(1, AcqRel);
        table_word(t, CBT_BLOCKS).fetch_add(1, Relaxed);
        table_word(t, CBT_RELINQUISH).fetch_or(REL_CBUF, AcqRel);
        let seq = table_word(t, CBT_FREE_SEQ).load(Acquire);
        let me = crate::runtime::my_tid();
        if self.free[class]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            // a holder of this class other than us: lend it our priority
            // until it frees (it frees before it lets go of the word)
            let holder = self
                .slabs
                .iter()
                .filter_map(|s| s.get())
                .filter(|s| s.class == class)
                .find_map(|s| {
                    (0..SLAB_OBJS as u32)
                        .find(|&o| {
                            let owner = s.word(o, CBM_PI).load(Relaxed) & pifutex::FUTEX_TID_MASK;
                            s.word(o, CBM_STATE_GEN).load(Relaxed) & CB_STATE_MASK == CB_ALLOC
                                && owner != 0
                                && owner != me
                        })
                        .map(|o| s.word(o, CBM_PI))
                });
            // the "w/o PI" variants: wait without lending our priority
            let nopi = table_word(t, CBT_NOPI).load(Relaxed) != 0;
            match holder {
                Some(_) if nopi => {}
                Some(pi) => {
                    if let Ok(true) = pifutex::lock_pi(pi, Some(Duration::from_millis(20))) {
                        let _ = pifutex::unlock_pi(pi, me);
                    }
                }
                // nobody else holds a buffer of this class: none will be
                // freed while we wait (the limit is below one slab, or we
                // hold every buffer ourselves): ENOMEM, as documented
                None => {
                    self.end_wait(t0);
                    return Err(Error::Cbuf(libc::ENOMEM));
                }
            }
            if table_word(t, CBT_FREE_SEQ).load(Acquire) == seq {
                futex_wait(table_word(t, CBT_FREE_SEQ), seq, Duration::from_millis(2));
            }
        }
        self.end_wait(t0);
        Ok(())
    }

    fn end_wait(&self, t0: u64) {
        let t = &self.table;
        if table_word(t, CBT_WAITERS).fetch_sub(1, AcqRel) == 1 {
            table_word(t, CBT_RELINQUISH).fetch_and(!REL_CBUF, AcqRel);
        }
        let ns = pifutex::monotonic_ns().saturating_sub(t0);
        t.u64(CBT_BLOCK_NS).map(|w| w.fetch_add(ns, Relaxed));
        crate::blocks::record(t, CBT_BLK, crate::runtime::origin_tid(), ns);
    }

    /// `cbuf_free(ptr)`: ptr must be a buffer this component allocated.
    pub fn free(&self, ptr: *mut u8) -> Result<(), Error> {
        let a = ptr as usize;
        let (slab, off) = {
            let v = self.by_addr.read().unwrap_or_else(|e| e.into_inner());
            let at = v.partition_point(|e| e.0 <= a);
            let &(base, len, slab) = at
                .checked_sub(1)
                .and_then(|i| v.get(i))
                .ok_or(Error::Cbuf(libc::EINVAL))?;
            if a >= base + len {
                return Err(Error::Cbuf(libc::EINVAL));
            }
            (slab, a - base)
        };
        let s = self.slabs[slab as usize]
            .get()
            .filter(|s| s.owned)
            .ok_or(Error::Cbuf(libc::EINVAL))?;
        let size = class_size(s.class);
        if off % size != 0 {
            return Err(Error::Cbuf(libc::EINVAL));
        }
        let obj = (off / size) as u32;
        let w = s.word(obj, CBM_STATE_GEN);
        let v = w.load(Acquire);
        if v & CB_STATE_MASK != CB_ALLOC {
            return Err(Error::Cbuf(libc::EINVAL));
        }
        let next = (((v >> 2).wrapping_add(1) & ((1 << CBID_GEN_BITS) - 1)) << 2) | CB_FREE;
        w.store(next, Release);
        self.free[s.class]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slab << SLAB_SHIFT | obj);
        if table_word(&self.table, CBT_RELINQUISH).load(Acquire) & REL_CBUF != 0 {
            let seq = table_word(&self.table, CBT_FREE_SEQ);
            seq.fetch_add(1, AcqRel);
            pifutex::wake(seq, 1);
        }
        // last: while we hold the word a blocked allocator boosts us, so
        // the buffer is back in the cache before our priority drops (a
        // middle-priority task cannot stop us in between). A buffer freed
        // by another thread than the one that allocated it: only the
        // owner can hand a PI word over, so the word is cleared with a
        // CAS; a thread blocked on it sees that at its next 20 ms timeout.
        let pi = s.word(obj, CBM_PI);
        let me = crate::runtime::my_tid();
        let cur = pi.load(Acquire);
        if cur & pifutex::FUTEX_TID_MASK == me {
            let _ = pifutex::unlock_pi(pi, me);
        } else if cur != 0 {
            let _ = pi.compare_exchange(cur, 0, AcqRel, Relaxed);
        }
        Ok(())
    }

    /// `cbuf2buf(cbid, size)`: the buffer a cbid names, mapped here once
    /// and cached.
    pub fn cbuf2buf(&self, id: CbufId, size: usize) -> Result<*mut u8, Error> {
        let slab = id.slab();
        if slab == 0 {
            return Err(Error::Cbuf(libc::EINVAL));
        }
        let s = match self.slabs[slab as usize].get() {
            Some(s) if radix_get(&self.table, slab) => s,
            _ => {
                let (class, fds) = self.request(OP_MAP, slab)?;
                let (data, meta) = fds.ok_or_else(|| Error::Corrupt("reply without fds".into()))?;
                if class as usize >= CB_CLASSES {
                    return Err(Error::Corrupt(format!("class {class}")));
                }
                self.install(slab, class as usize, data, meta, false)?
            }
        };
        if size > class_size(s.class) {
            return Err(Error::Cbuf(libc::ERANGE));
        }
        let v = s.word(id.obj(), CBM_STATE_GEN).load(Acquire);
        if v & CB_STATE_MASK != CB_ALLOC || v >> 2 != id.gen() {
            return Err(Error::Cbuf(libc::ESTALE));
        }
        Ok(s.ptr(id.obj()))
    }

    /// Records one completed job of the thread this one works for
    /// ([`crate::runtime::origin_tid`]) with its tardiness, in the table
    /// the manager reads at each policy run (see [`crate::runtime::Periodic`]).
    pub fn report_job(&self, tardiness_ns: u64) {
        crate::blocks::record(
            &self.table,
            CBT_TARDY,
            crate::runtime::origin_tid(),
            tardiness_ns,
        );
    }

    /// Threads blocked in the CBUF tmem_get of this component now.
    pub fn waiters(&self) -> u32 {
        table_word(&self.table, CBT_WAITERS).load(Acquire)
    }

    pub fn blocks(&self) -> u32 {
        table_word(&self.table, CBT_BLOCKS).load(Relaxed)
    }
}

struct SlabRec {
    owner: usize,
    class: usize,
    data: SharedMem,
    meta: SharedMem,
    mapped_into: Vec<usize>,
}

struct CompRec {
    table: SharedMem,
    bytes: usize,
    /// δ^j in bytes: what the component may hold now (≤ `max`).
    limit: usize,
    /// The system file's bound (`cbuf_kib`).
    max: usize,
    /// Components allowed to map this component's slabs (downstream).
    readers: Vec<usize>,
    /// Its largest slab so far, bytes: the least its cache may hold and
    /// still make progress (P3).
    largest: usize,
}

/// The CBUF manager's state: every slab, every component's table.
pub struct CbufManager {
    comps: Vec<CompRec>,
    slabs: Vec<Option<SlabRec>>,
    pool: usize,
    used: usize,
    /// The service thread's tid (0 before it runs): see `svc_pi`.
    svc_tid: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CbufCounters {
    /// δ^j (pages of 4 KiB).
    pub desired_pages: u32,
    pub slabs: u32,
    pub bytes: u64,
    pub resident: u64,
    pub in_use: u32,
    pub waiters: u32,
    pub blocks: u32,
    /// Per-thread block count and time on this cache, cumulative.
    pub threads: Vec<crate::policy::ThreadBlock>,
}

impl CbufManager {
    /// `limits[i]`: bytes component i may hold; `readers[i]`: who may map
    /// i's slabs; `pool`: the global CBUF pool in bytes.
    pub fn new(
        limits: &[usize],
        readers: Vec<Vec<usize>>,
        pool: usize,
    ) -> Result<CbufManager, Error> {
        let comps = limits
            .iter()
            .zip(readers)
            .map(|(&limit, readers)| {
                let t = SharedMem::create(c"mantle-cbuf-table", CBUF_TABLE_LEN)
                    .map_err(Error::sys("memfd"))?;
                // the component maps it read-write: sealed, it cannot
                // shrink it under the manager (SIGBUS)
                t.seal_size().map_err(Error::sys("seal cbuf table"))?;
                table_word(&t, 4).store(ABI_VERSION, Relaxed);
                table_word(&t, 0).store(CBUF_MAGIC, Release);
                Ok(CompRec {
                    table: t,
                    bytes: 0,
                    limit,
                    max: limit,
                    readers,
                    largest: 0,
                })
            })
            .collect::<Result<_, Error>>()?;
        let m = CbufManager {
            comps,
            slabs: vec![None],
            pool,
            used: 0,
            svc_tid: 0,
        };
        for c in 0..m.comps.len() {
            m.publish(c);
        }
        Ok(m)
    }

    /// Writes δ^j and the bytes held into component c's table, where its
    /// allocator reads them to wait without asking (see `Cbufs::grow`).
    fn publish(&self, c: usize) {
        let Some(k) = self.comps.get(c) else { return };
        if let Some(w) = k.table.u64(CBT_LIMIT) {
            w.store(k.limit as u64, Release);
        }
        if let Some(w) = k.table.u64(CBT_BYTES) {
            w.store(k.bytes as u64, Release);
        }
    }

    pub fn table_fd(&self, c: usize) -> &OwnedFd {
        self.comps[c].table.fd()
    }

    /// Serves one request of component `c` on `sock`; Err only when the
    /// socket itself failed (the component is gone).
    pub fn serve_one(&mut self, c: usize, sock: &OwnedFd) -> std::io::Result<()> {
        let mut m = [0u8; 8];
        read_exact_raw(sock.as_fd(), &mut m)?;
        let op = u32::from_ne_bytes(m[..4].try_into().unwrap_or_default());
        let arg = u32::from_ne_bytes(m[4..].try_into().unwrap_or_default());
        let r = match op {
            OP_NEW_SLAB => self.new_slab(c, arg as usize),
            OP_MAP => self.map(c, arg),
            _ => Err(libc::EINVAL),
        };
        let mut out = [0u8; 8];
        match r {
            Ok((val, data, meta)) => {
                out[4..].copy_from_slice(&val.to_ne_bytes());
                write_all_raw(sock.as_fd(), &out)?;
                mantle_sys::supervise::send_fd(sock.as_fd(), data.as_raw_fd())?;
                mantle_sys::supervise::send_fd(sock.as_fd(), meta.as_raw_fd())?;
            }
            Err(errno) => {
                out[..4].copy_from_slice(&errno.to_ne_bytes());
                write_all_raw(sock.as_fd(), &out)?;
            }
        }
        self.release_requester(c);
        Ok(())
    }

    /// The service thread's side of `svc_pi`: records its tid in every
    /// table, so requesters can lend it their priority.
    pub fn set_service_thread(&mut self, tid: u32) {
        self.svc_tid = tid;
        for k in &self.comps {
            table_word(&k.table, CBT_SVC_TID).store(tid, Release);
        }
    }

    /// After a complete reply to component `c`: releases `svc_pi` if the
    /// requester handed it to us (its boost ends; the kernel gives the
    /// word to the requester). A word the component left in any other
    /// state is not ours: FUTEX_UNLOCK_PI refuses it (EPERM), ignored.
    fn release_requester(&self, c: usize) {
        if self.svc_tid == 0 {
            return;
        }
        if let Some(k) = self.comps.get(c) {
            let w = table_word(&k.table, CBT_SVC_PI);
            if w.load(Acquire) & pifutex::FUTEX_TID_MASK == self.svc_tid {
                let _ = pifutex::unlock_pi(w, self.svc_tid);
            }
        }
    }

    fn new_slab(&mut self, c: usize, class: usize) -> Result<(u32, OwnedFd, OwnedFd), i32> {
        if class >= CB_CLASSES || c >= self.comps.len() {
            return Err(libc::EINVAL);
        }
        let len = SLAB_OBJS * class_size(class);
        let comp = &self.comps[c];
        if comp.bytes + len > comp.limit || self.used + len > self.pool {
            return Err(libc::ENOMEM);
        }
        let slab = self.slabs.len() as u32;
        if slab >= MAX_SLABS {
            return Err(libc::ENOSPC);
        }
        let data = SharedMem::create(c"mantle-cbuf", len).map_err(|_| libc::ENOMEM)?;
        let meta =
            SharedMem::create(c"mantle-cbuf-meta", CBUF_META_LEN).map_err(|_| libc::ENOMEM)?;
        // every component the slab reaches maps the data read-write (and
        // the owner the metadata): sealed sizes, so none of them can
        // truncate either under the manager or the others (SIGBUS); a
        // punched hole keeps the size and is still allowed
        data.seal_size().map_err(|_| libc::EIO)?;
        meta.seal_size().map_err(|_| libc::EIO)?;
        // The components a cbid is passed to get the metadata O_RDONLY;
        // a memfd's inode is 0777, so without this any of them could
        // reopen /proc/self/fd/N read-write and forge states. 0400: a
        // reopen for writing needs CAP_DAC_OVERRIDE (a component running
        // as root still has it: docs/comp.md, Security).
        use std::os::unix::fs::PermissionsExt;
        std::fs::File::from(meta.fd().try_clone().map_err(|_| libc::EMFILE)?)
            .set_permissions(std::fs::Permissions::from_mode(0o400))
            .map_err(|_| libc::EIO)?;
        if !radix_set(&self.comps[c].table, slab, true) {
            return Err(libc::ENOSPC);
        }
        let fds = (
            data.fd().try_clone().map_err(|_| libc::EMFILE)?,
            meta.fd().try_clone().map_err(|_| libc::EMFILE)?,
        );
        self.slabs.push(Some(SlabRec {
            owner: c,
            class,
            data,
            meta,
            mapped_into: vec![c],
        }));
        self.comps[c].bytes += len;
        self.comps[c].largest = self.comps[c].largest.max(len);
        self.used += len;
        self.publish(c);
        Ok((slab, fds.0, fds.1))
    }

    fn map(&mut self, c: usize, slab: u32) -> Result<(u32, OwnedFd, OwnedFd), i32> {
        let Some(Some(s)) = self.slabs.get_mut(slab as usize) else {
            return Err(libc::ENOENT);
        };
        if s.owner != c && !self.comps[s.owner].readers.contains(&c) {
            return Err(libc::EACCES);
        }
        if !radix_set(&self.comps[c].table, slab, true) {
            return Err(libc::ENOSPC);
        }
        if !s.mapped_into.contains(&c) {
            s.mapped_into.push(c);
        }
        let data = s.data.fd().try_clone().map_err(|_| libc::EMFILE)?;
        let meta = if s.owner == c {
            s.meta.fd().try_clone().map_err(|_| libc::EMFILE)?
        } else {
            std::fs::File::open(format!("/proc/self/fd/{}", s.meta.fd().as_raw_fd()))
                .map_err(|_| libc::EACCES)?
                .into()
        };
        Ok((s.class as u32, data, meta))
    }

    /// Reclaims component `c`'s slabs whose buffers are all free (or all
    /// of them, `force`, when `c` died): revoke, unmap from every table,
    /// punch the hole. Returns the bytes given back.
    pub fn reclaim(&mut self, c: usize, force: bool) -> usize {
        self.reclaim_down_to(c, force, 0)
    }

    /// `set_desired(c, pages)` for CBUFs: the component may hold that
    /// much from now on (never more than its `cbuf_kib`); free slabs above
    /// it are reclaimed now, and the rest as their buffers come free (the
    /// manager calls [`CbufManager::apply`] every tick). Returns δ^j as set.
    pub fn set_desired(&mut self, c: usize, pages: u32) -> u32 {
        let Some(comp) = self.comps.get_mut(c) else {
            return 0;
        };
        comp.limit = (pages as usize * 4096).min(comp.max);
        self.publish(c);
        self.apply(c);
        (self.comps[c].limit / 4096) as u32
    }

    /// Moves component `c` toward δ^j by reclaiming free slabs while it
    /// holds more (G3a: asynchronous, never a buffer in use).
    pub fn apply(&mut self, c: usize) -> usize {
        let Some(comp) = self.comps.get(c) else {
            return 0;
        };
        if comp.bytes <= comp.limit {
            return 0;
        }
        self.reclaim_down_to(c, false, comp.limit)
    }

    /// δ^j, a^j (pages) and the bound of component `c`.
    pub fn desired_pages(&self, c: usize) -> u32 {
        self.comps.get(c).map_or(0, |k| (k.limit / 4096) as u32)
    }

    /// Table II's view of component `c`'s CBUF cache (pages), clearing
    /// the used bits; the caller adds δ^j, per-thread deltas and r^j.
    pub fn view(&self, c: usize) -> crate::policy::CacheView {
        let Some(comp) = self.comps.get(c) else {
            return Default::default();
        };
        let (mut in_use, mut used) = (0usize, 0usize);
        for s in self.slabs.iter().flatten().filter(|s| s.owner == c) {
            let size = class_size(s.class);
            for o in 0..SLAB_OBJS {
                let w = |off| s.meta.u32(o * CBM_SIZE + off);
                if w(CBM_STATE_GEN).is_some_and(|w| w.load(Relaxed) & CB_STATE_MASK == CB_ALLOC) {
                    in_use += size;
                }
                if w(CBM_HOLDER).is_some_and(|w| w.fetch_and(!CBM_USED, AcqRel) & CBM_USED != 0) {
                    used += size;
                }
            }
        }
        crate::policy::CacheView {
            allocated: comp.bytes.div_ceil(4096) as u32,
            in_use: in_use.div_ceil(4096) as u32,
            used_since: used.div_ceil(4096) as u32,
            blocked: table_word(&comp.table, CBT_WAITERS).load(Relaxed),
            desired: (comp.limit / 4096) as u32,
            max: comp.max.div_ceil(4096) as u32,
            min: comp.largest.div_ceil(4096) as u32,
            ..Default::default()
        }
    }

    /// Per-thread tardiness reports of component `c` (cumulative: count =
    /// jobs, ns = summed tardiness), as the component wrote them.
    pub fn tardiness(&self, c: usize) -> Vec<crate::policy::ThreadBlock> {
        self.comps
            .get(c)
            .map_or_else(Vec::new, |k| crate::blocks::read(&k.table, CBT_TARDY))
    }

    /// Sets or clears the "w/o PI" flag of component `c`'s CBUF cache.
    pub fn set_nopi(&self, c: usize, nopi: bool) {
        if let Some(k) = self.comps.get(c) {
            table_word(&k.table, CBT_NOPI).store(nopi as u32, Release);
        }
    }

    /// Per-thread block statistics of component `c`'s CBUF cache.
    pub fn thread_blocks(&self, c: usize) -> Vec<crate::policy::ThreadBlock> {
        self.comps
            .get(c)
            .map_or_else(Vec::new, |k| crate::blocks::read(&k.table, CBT_BLK))
    }

    /// Before a restarted component runs: its table's counters belong to
    /// threads of the dead instance (its own), so they start over; the
    /// requests and replies the dead instance left in its socket
    /// (`mine`: the manager's end, `theirs`: the component's) are
    /// dropped, so the new instance never reads an old reply.
    pub fn reset(&mut self, c: usize, mine: &OwnedFd, theirs: &OwnedFd) {
        if let Some(k) = self.comps.get(c) {
            for off in [CBT_RELINQUISH, CBT_WAITERS, CBT_BLOCKS, CBT_SVC_PI] {
                table_word(&k.table, off).store(0, Release);
            }
            if let Some(w) = k.table.u64(CBT_BLOCK_NS) {
                w.store(0, Relaxed);
            }
            crate::blocks::clear(&k.table, CBT_BLK);
            crate::blocks::clear(&k.table, CBT_TARDY);
        }
        for s in [mine, theirs] {
            let mut p = [libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            while matches!(mantle_sys::supervise::poll(&mut p, 0), Ok(n) if n > 0)
                && p[0].revents & libc::POLLIN != 0
            {
                // one message each (data or fd: a received fd is closed)
                if let Err(e) = mantle_sys::supervise::recv_fd(s.as_fd()) {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        break;
                    }
                }
            }
        }
    }

    fn reclaim_down_to(&mut self, c: usize, force: bool, keep: usize) -> usize {
        let mut back = 0;
        if c >= self.comps.len() {
            return 0;
        }
        for n in 0..self.slabs.len() {
            if self.comps[c].bytes <= keep {
                break;
            }
            let Some(s) = self.slabs[n].as_ref() else {
                continue;
            };
            if s.owner != c {
                continue;
            }
            let words: Vec<&AtomicU32> = (0..SLAB_OBJS)
                .map(|o| s.meta.u32(o * CBM_SIZE).expect("inside meta"))
                .collect();
            let mut revoked = Vec::new();
            let mut ok = true;
            for w in &words {
                let v = w.load(Acquire);
                let free = v & CB_STATE_MASK == CB_FREE;
                if (free || force)
                    && w.compare_exchange(v, (v & !CB_STATE_MASK) | CB_REVOKED, AcqRel, Acquire)
                        .is_ok()
                {
                    revoked.push((w, v));
                } else {
                    ok = false;
                    break;
                }
            }
            if !ok {
                for (w, v) in revoked {
                    w.store(v, Release);
                }
                continue;
            }
            for &m in &s.mapped_into {
                radix_set(&self.comps[m].table, n as u32, false);
            }
            let len = s.data.len();
            let _ = s.data.punch_hole(0, len);
            self.comps[c].bytes -= len;
            self.used -= len;
            self.publish(c);
            back += len;
            self.slabs[n] = None;
        }
        back
    }

    pub fn counters(&self, c: usize) -> CbufCounters {
        let t = &self.comps[c].table;
        let mut k = CbufCounters {
            desired_pages: (self.comps[c].limit / 4096) as u32,
            threads: crate::blocks::read(t, CBT_BLK),
            waiters: table_word(t, CBT_WAITERS).load(Relaxed),
            blocks: table_word(t, CBT_BLOCKS).load(Relaxed),
            ..Default::default()
        };
        for s in self.slabs.iter().flatten().filter(|s| s.owner == c) {
            k.slabs += 1;
            k.bytes += s.data.len() as u64;
            k.resident += s.data.resident_bytes().unwrap_or(0);
            k.in_use += (0..SLAB_OBJS)
                .filter(|&o| {
                    s.meta
                        .u32(o * CBM_SIZE)
                        .is_some_and(|w| w.load(Relaxed) & CB_STATE_MASK == CB_ALLOC)
                })
                .count() as u32;
        }
        k
    }

    /// Holders of component c's buffers since longer than `bound_ms`:
    /// (slab, obj, holder tid, held ms, since: the holder's ms stamp).
    pub fn holders_past(&self, c: usize, bound_ms: u64) -> Vec<(u32, u32, u32, u64, u32)> {
        let now = now_ms();
        let mut out = Vec::new();
        for (n, s) in self.slabs.iter().enumerate() {
            let Some(s) = s.as_ref().filter(|s| s.owner == c) else {
                continue;
            };
            for o in 0..SLAB_OBJS {
                let w = |off| {
                    s.meta
                        .u32(o * CBM_SIZE + off)
                        .map_or(0, |w| w.load(Relaxed))
                };
                if w(CBM_STATE_GEN) & CB_STATE_MASK == CB_ALLOC {
                    let held = now.wrapping_sub(w(CBM_SINCE)) as u64;
                    if held > bound_ms {
                        out.push((
                            n as u32,
                            o as u32,
                            w(CBM_HOLDER) & !CBM_USED,
                            held,
                            w(CBM_SINCE),
                        ));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_has_the_smallest_class_that_fits() {
        assert_eq!(class_of(0), None);
        for size in 1..=(CB_MIN << (CB_CLASSES - 1)) {
            let k = class_of(size).unwrap();
            assert!(size <= class_size(k) && (k == 0 || size > class_size(k - 1)));
        }
        assert_eq!(class_of((CB_MIN << (CB_CLASSES - 1)) + 1), None);
    }

    #[test]
    #[ignore = "needs root (setpriv to nobody)"]
    fn a_receiver_cannot_reopen_the_metadata_for_writing() {
        mantle_testsupport::require_root("setpriv");
        // component 1 may map component 0's slabs
        let mut m = CbufManager::new(&[1 << 20, 1 << 20], vec![vec![1], vec![]], 4 << 20).unwrap();
        let (slab, _data, _meta) = m.new_slab(0, 0).unwrap();
        let (_, _, ro) = m.map(1, slab).unwrap();
        let probe = |mode: &str| {
            let mut cmd = std::process::Command::new("setpriv");
            cmd.args([
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg(format!("exec 4{mode}/proc/self/fd/3 && echo OPENED"));
            mantle_testsupport::actor::pass_fds(&mut cmd, &[(ro.as_raw_fd(), 3)]);
            let out = cmd.output().unwrap();
            String::from_utf8_lossy(&out.stdout).contains("OPENED")
        };
        // the fd it holds reads; a reopen for writing (or at all) fails
        assert!(!probe("<>"), "reopened the metadata read-write");
        assert!(!probe(">"), "reopened the metadata for writing");
    }

    #[test]
    fn radix_set_and_get_cover_every_slab_up_to_the_leaf_budget() {
        let t = SharedMem::create(c"t", CBUF_TABLE_LEN).unwrap();
        for slab in 0..MAX_SLABS {
            assert!(!radix_get(&t, slab));
        }
        // 16 leaves of 128: slabs 0..2048 fit, in any 16 distinct leaves
        for slab in 0..(CB_LEAVES * CB_L2) as u32 {
            assert!(radix_set(&t, slab, true));
            assert!(radix_get(&t, slab));
        }
        assert!(!radix_set(&t, MAX_SLABS - 1, true), "a 17th leaf");
        for slab in 0..(CB_LEAVES * CB_L2) as u32 {
            assert!(radix_set(&t, slab, false));
            assert!(!radix_get(&t, slab));
        }
    }
}
