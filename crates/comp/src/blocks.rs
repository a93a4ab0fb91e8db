//! Per-thread block statistics in shared memory (Table II's
//! `get_thd_blk_time` / `get_thd_blk_cnt`; layout `mantle_abi::comp::
//! BlockEntry`): a thread that blocked in a `tmem_get` adds its count and
//! time to its own entry of the table of the cache it blocked on; the
//! manager reads the table at each policy run.
//!
//! The writer is another process (a client for stacks, the component
//! itself for CBUFs), so the table is a claim: any value read is just a
//! number; a full table puts further threads in the last, shared entry.
//! No locks: an entry is claimed with one CAS on its tid word.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

use mantle_abi::comp::*;
use mantle_sys::shm::SharedMem;

use crate::policy::ThreadBlock;

/// Adds one block of `ns` by thread `tid` to the table at `base` of `mem`.
pub(crate) fn record(mem: &SharedMem, base: usize, tid: u32, ns: u64) {
    let word = |i: usize, off: usize| mem.u32(base + i * BLK_SIZE + off);
    let mut at = BLK_ENTRIES - 1;
    for i in 0..BLK_ENTRIES - 1 {
        let Some(t) = word(i, BLK_TID) else { return };
        let cur = t.load(Acquire);
        if cur == tid
            || (cur == 0 && {
                match t.compare_exchange(0, tid, AcqRel, Acquire) {
                    Ok(_) => true,
                    Err(now) => now == tid,
                }
            })
        {
            at = i;
            break;
        }
    }
    if at == BLK_ENTRIES - 1 {
        if let Some(t) = word(at, BLK_TID) {
            t.store(BLK_OTHERS, Relaxed);
        }
    }
    if let Some(c) = word(at, BLK_COUNT) {
        c.fetch_add(1, Relaxed);
    }
    if let Some(n) = mem.u64(base + at * BLK_SIZE + BLK_NS) {
        n.fetch_add(ns, Relaxed);
    }
}

/// The table's entries in use, by tid (cumulative since start).
pub(crate) fn read(mem: &SharedMem, base: usize) -> Vec<ThreadBlock> {
    let mut out: Vec<ThreadBlock> = (0..BLK_ENTRIES)
        .filter_map(|i| {
            let o = base + i * BLK_SIZE;
            let tid = mem.u32(o + BLK_TID)?.load(Acquire);
            (tid != 0).then(|| ThreadBlock {
                tid,
                blocks: mem.u32(o + BLK_COUNT).map_or(0, |w| w.load(Relaxed)),
                block_ns: mem.u64(o + BLK_NS).map_or(0, |w| w.load(Relaxed)),
            })
        })
        .collect();
    out.sort_by_key(|b| b.tid);
    out.dedup_by_key(|b| b.tid);
    out
}

/// Empties the table (the manager, before a restarted component runs).
pub(crate) fn clear(mem: &SharedMem, base: usize) {
    for i in 0..BLK_ENTRIES {
        let o = base + i * BLK_SIZE;
        for off in [BLK_TID, BLK_COUNT] {
            if let Some(w) = mem.u32(o + off) {
                w.store(0, Relaxed);
            }
        }
        if let Some(w) = mem.u64(o + BLK_NS) {
            w.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_gets_an_entry_until_the_shared_last_one() {
        let m = SharedMem::create(c"t", 64 + BLK_LEN).unwrap();
        // more threads than entries, each blocking tid times
        let n = BLK_ENTRIES as u32 + 5;
        for tid in 1..=n {
            for _ in 0..tid {
                record(&m, 64, tid, 10);
            }
        }
        let got = read(&m, 64);
        assert_eq!(got.len(), BLK_ENTRIES);
        for (i, b) in got.iter().take(BLK_ENTRIES - 1).enumerate() {
            let tid = i as u32 + 1;
            assert_eq!((b.tid, b.blocks, b.block_ns), (tid, tid, 10 * tid as u64));
        }
        let others = got.last().unwrap();
        let rest: u32 = (BLK_ENTRIES as u32..=n).sum();
        assert_eq!(
            (others.tid, others.blocks, others.block_ns),
            (BLK_OTHERS, rest, 10 * rest as u64)
        );
        clear(&m, 64);
        assert!(read(&m, 64).is_empty());
    }

    #[test]
    fn concurrent_threads_never_share_an_entry() {
        let m = std::sync::Arc::new(SharedMem::create(c"t", BLK_LEN).unwrap());
        let ts: Vec<_> = (1..=8u32)
            .map(|tid| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        record(&m, 0, tid, 1);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        let got = read(&m, 0);
        assert_eq!(got.len(), 8);
        assert!(got.iter().all(|b| b.blocks == 1000 && b.block_ns == 1000));
    }
}
