//! Manager ↔ component: the shared layouts of the component runtime
//! (crates/comp), after the TMEM paper's Figures 4 and 5
//! (seeds/003, §IV-C/D).
//!
//! Every struct here lives in a memfd mapped `MAP_SHARED` by the manager
//! (the `mantle comp up` process), by the component that owns it, and —
//! for the invocation region — by the components allowed to invoke it.
//! Every side reaches the memory only through atomics of one aligned word
//! (crates/sys/src/shm.rs), so these types document offsets; the offsets
//! are the `*_OFF` constants and are checked against the structs below.
//!
//! ## Invocation region (one per component)
//! ```text
//! offset  size  field
//! 0       128   RegionHeader
//! 128     128   CtxSlot[0]
//! 256     128   CtxSlot[1] ... up to nctx (≤ MAX_CTX)
//! 128+nctx*128  BLK_LEN  BlockEntry[BLK_ENTRIES]: per-thread block stats
//! ```
//! `BlockEntry` (16 bytes, Table II's per-thread data, written by the
//! thread that blocked in `tmem_get`, read by the manager):
//! `u32 tid` (claimed with a CAS from 0; the last entry is shared by every
//! thread past the first `BLK_ENTRIES - 1`, tid `BLK_OTHERS`), `u32 count`
//! (times blocked), `u64 ns` (total time blocked). Cumulative: the manager
//! takes differences between policy runs.
//! `RegionHeader`:
//! ```text
//! 0  u32 magic (REGION_MAGIC)      4  u32 version (ABI_VERSION)
//! 8  u32 nctx (slots)              12 u32 server_pid
//! 16 u64 free_head: gen<<32 | (idx+1), 0 = empty (ABA-tagged Treiber stack)
//! 24 u32 relinquish (REL_STACK | REL_CBUF)
//! 28 u32 free_seq (futex: bumped and woken by tmem_put)
//! 32 u32 waiters (threads blocked in tmem_get for a stack)
//! 36 u32 dead (1 once the manager saw the component die; futex-woken)
//! 40 u32 allocated (a^j: contexts on the freelist or busy)
//! 44 u32 desired (δ^j, set by the policy through the manager)
//! 48 u32 ready (contexts whose thread started)   52 u32 blocks (tmem_get count)
//! 56 u64 block_ns (total time callers spent in tmem_get)
//! 64 u32 epoch (bumped by the manager when it restarts the component: a
//!    caller that started a call in another epoch gets an error)
//! 68 u32 nopi (1: callers blocked on the empty cache do not lend their
//!    priority: the policies' "w/o PI" variants; the manager writes it)
//! 72..128 reserved
//! ```
//! `CtxSlot` (one execution context: a thread with its own stack in the
//! server):
//! ```text
//! 0  u32 call (futex: CALL_IDLE, CALL_REQ, CALL_DONE, CALL_DEAD)
//! 4  u32 pi   (PI futex word: owner tid while the context runs a call)
//! 8  u32 tid  (the context thread's tid)
//! 12 u32 own  (OWN_PARKED, OWN_FREE, OWN_BUSY)
//! 16 u32 next (freelist link: idx+1, 0 = end)
//! 20 u32 prio (caller's scheduling: PRIO_* encoding)
//! 24 u32 caller_tid                28 u32 func
//! 32 u64 args[6]                   80 u64 ret
//! 88 u64 since_ns (CLOCK_MONOTONIC when taken)
//! 96 u32 used (set on every take; cleared by the policy run)
//! 100 u32 status (0, or an errno from the server)
//! 104 u32 caller_pid
//! 108 u32 hold_pi (PI futex word: the tid of the caller holding the
//!     context, from its pop until after its push; a caller blocked on
//!     the empty cache locks it, so the kernel boosts the holder through
//!     its whole critical section, including the push back)
//! 112 u32 origin (the tid of the thread the call runs for: the first
//!     caller of a chain of invocations; block and tardiness records use
//!     it, so a thread is one thread of T across components)
//! 116..128 reserved
//! ```
//!
//! ## CBUF table (one per component)
//! The two-level radix table of Figure 5: `cbid → slab`, shared with the
//! CBUF manager; the slab memory itself is elsewhere (one memfd per slab),
//! so a component writing its buffers cannot corrupt the metadata.
//! ```text
//! 0       64               CbufHeader: magic u32, version u32, relinquish u32,
//!                          waiters u32, free_seq u32, nslabs u32 ...
//! 64      RADIX_L1*4       level 1: u32 index+1 of a level-2 leaf, 0 = none
//! ...     leaves           RADIX_L2 CbufEntry each
//! ```
//! `CbufEntry` (16 bytes): `u32 gen_state` (generation << 2 | mapped bit |
//! owner bit), `u32 holder_tid`, `u64 since_ns`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub const REGION_MAGIC: u32 = 0x4d43_5452; // "MCTR"
pub const CBUF_MAGIC: u32 = 0x4d43_4246; // "MCBF"
pub const ABI_VERSION: u32 = 3;
/// Contexts per component (slot indices fit in the freelist's 32 bits
/// many times over; the bound keeps a region at most 64 KiB + header).
pub const MAX_CTX: u32 = 511;
/// Words of arguments in a slot (x86-64 has six argument registers; the
/// paper's x86-32 limit is the same count).
pub const NARGS: usize = 6;

pub const REL_STACK: u32 = 1;
pub const REL_CBUF: u32 = 2;

pub const CALL_IDLE: u32 = 0;
pub const CALL_REQ: u32 = 1;
pub const CALL_DONE: u32 = 2;
/// The server died (or the context was torn down) during the call.
pub const CALL_DEAD: u32 = 3;

pub const OWN_PARKED: u32 = 0;
pub const OWN_FREE: u32 = 1;
pub const OWN_BUSY: u32 = 2;

/// `prio` encoding: `policy << 16 | value`; for SCHED_OTHER the value is
/// the nice level + 20 (0..39), for SCHED_FIFO/RR the RT priority 1..99.
pub const PRIO_POLICY_SHIFT: u32 = 16;

/// Radix table geometry: 2 levels of 64 entries: 4096 cbufs per component
/// table. A cbid is `slab << SLAB_SHIFT | object`, see [`CbufId`].
pub const RADIX_L1: usize = 64;
pub const RADIX_L2: usize = 64;
/// Objects per slab (the largest count, for the smallest size class).
pub const SLAB_SHIFT: u32 = 6;
pub const SLAB_OBJS: usize = 1 << SLAB_SHIFT;

#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RegionHeader {
    pub magic: u32,
    pub version: u32,
    pub nctx: u32,
    pub server_pid: u32,
    pub free_head: u64,
    pub relinquish: u32,
    pub free_seq: u32,
    pub waiters: u32,
    pub dead: u32,
    pub allocated: u32,
    pub desired: u32,
    pub ready: u32,
    pub blocks: u32,
    pub block_ns: u64,
    pub epoch: u32,
    pub nopi: u32,
    /// Times a context out of the cache gave its stack pages back.
    pub trims: u32,
    pub reserved: [u32; 13],
}

/// One thread's block statistics (see the module doc).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct BlockEntry {
    pub tid: u32,
    pub count: u32,
    pub ns: u64,
}
pub const BLK_TID: usize = 0;
pub const BLK_COUNT: usize = 4;
pub const BLK_NS: usize = 8;
pub const BLK_SIZE: usize = 16;
pub const BLK_ENTRIES: usize = 32;
pub const BLK_LEN: usize = BLK_ENTRIES * BLK_SIZE;
/// The tid of the last, shared entry.
pub const BLK_OTHERS: u32 = u32::MAX;

#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CtxSlot {
    pub call: u32,
    pub pi: u32,
    pub tid: u32,
    pub own: u32,
    pub next: u32,
    pub prio: u32,
    pub caller_tid: u32,
    pub func: u32,
    pub args: [u64; NARGS],
    pub ret: u64,
    pub since_ns: u64,
    pub used: u32,
    pub status: u32,
    pub caller_pid: u32,
    pub hold_pi: u32,
    pub origin: u32,
    pub reserved: [u32; 3],
}

pub const HDR_MAGIC: usize = 0;
pub const HDR_VERSION: usize = 4;
pub const HDR_NCTX: usize = 8;
pub const HDR_SERVER_PID: usize = 12;
pub const HDR_FREE_HEAD: usize = 16;
pub const HDR_RELINQUISH: usize = 24;
pub const HDR_FREE_SEQ: usize = 28;
pub const HDR_WAITERS: usize = 32;
pub const HDR_DEAD: usize = 36;
pub const HDR_ALLOCATED: usize = 40;
pub const HDR_DESIRED: usize = 44;
pub const HDR_READY: usize = 48;
pub const HDR_BLOCKS: usize = 52;
pub const HDR_BLOCK_NS: usize = 56;
pub const HDR_EPOCH: usize = 64;
pub const HDR_NOPI: usize = 68;
pub const HDR_TRIMS: usize = 72;
pub const HDR_SIZE: usize = 128;

pub const CTX_CALL: usize = 0;
pub const CTX_PI: usize = 4;
pub const CTX_TID: usize = 8;
pub const CTX_OWN: usize = 12;
pub const CTX_NEXT: usize = 16;
pub const CTX_PRIO: usize = 20;
pub const CTX_CALLER_TID: usize = 24;
pub const CTX_FUNC: usize = 28;
pub const CTX_ARGS: usize = 32;
pub const CTX_RET: usize = 80;
pub const CTX_SINCE: usize = 88;
pub const CTX_USED: usize = 96;
pub const CTX_STATUS: usize = 100;
pub const CTX_CALLER_PID: usize = 104;
pub const CTX_HOLD_PI: usize = 108;
pub const CTX_ORIGIN: usize = 112;
pub const CTX_SIZE: usize = 128;

/// Bytes of an invocation region with `nctx` slots.
pub const fn region_len(nctx: u32) -> usize {
    region_blk_off(nctx) + BLK_LEN
}

/// Offset of the block table of a region with `nctx` slots.
pub const fn region_blk_off(nctx: u32) -> usize {
    HDR_SIZE + nctx as usize * CTX_SIZE
}

/// Offset of slot `i`.
pub const fn slot_off(i: u32) -> usize {
    HDR_SIZE + i as usize * CTX_SIZE
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<RegionHeader>() == HDR_SIZE);
    assert!(offset_of!(RegionHeader, nctx) == HDR_NCTX);
    assert!(offset_of!(RegionHeader, magic) == HDR_MAGIC);
    assert!(offset_of!(RegionHeader, version) == HDR_VERSION);
    assert!(offset_of!(RegionHeader, server_pid) == HDR_SERVER_PID);
    assert!(offset_of!(RegionHeader, free_head) == HDR_FREE_HEAD);
    assert!(offset_of!(RegionHeader, relinquish) == HDR_RELINQUISH);
    assert!(offset_of!(RegionHeader, free_seq) == HDR_FREE_SEQ);
    assert!(offset_of!(RegionHeader, waiters) == HDR_WAITERS);
    assert!(offset_of!(RegionHeader, dead) == HDR_DEAD);
    assert!(offset_of!(RegionHeader, allocated) == HDR_ALLOCATED);
    assert!(offset_of!(RegionHeader, desired) == HDR_DESIRED);
    assert!(offset_of!(RegionHeader, ready) == HDR_READY);
    assert!(offset_of!(RegionHeader, blocks) == HDR_BLOCKS);
    assert!(offset_of!(RegionHeader, block_ns) == HDR_BLOCK_NS);
    assert!(offset_of!(RegionHeader, epoch) == HDR_EPOCH);
    assert!(offset_of!(RegionHeader, nopi) == HDR_NOPI);
    assert!(offset_of!(RegionHeader, trims) == HDR_TRIMS);
    assert!(size_of::<BlockEntry>() == BLK_SIZE);
    assert!(offset_of!(BlockEntry, tid) == BLK_TID);
    assert!(offset_of!(BlockEntry, count) == BLK_COUNT);
    assert!(offset_of!(BlockEntry, ns) == BLK_NS);
    assert!(size_of::<CtxSlot>() == CTX_SIZE);
    assert!(offset_of!(CtxSlot, call) == CTX_CALL);
    assert!(offset_of!(CtxSlot, pi) == CTX_PI);
    assert!(offset_of!(CtxSlot, tid) == CTX_TID);
    assert!(offset_of!(CtxSlot, own) == CTX_OWN);
    assert!(offset_of!(CtxSlot, next) == CTX_NEXT);
    assert!(offset_of!(CtxSlot, prio) == CTX_PRIO);
    assert!(offset_of!(CtxSlot, caller_tid) == CTX_CALLER_TID);
    assert!(offset_of!(CtxSlot, func) == CTX_FUNC);
    assert!(offset_of!(CtxSlot, args) == CTX_ARGS);
    assert!(offset_of!(CtxSlot, ret) == CTX_RET);
    assert!(offset_of!(CtxSlot, since_ns) == CTX_SINCE);
    assert!(offset_of!(CtxSlot, used) == CTX_USED);
    assert!(offset_of!(CtxSlot, status) == CTX_STATUS);
    assert!(offset_of!(CtxSlot, caller_pid) == CTX_CALLER_PID);
    assert!(offset_of!(CtxSlot, hold_pi) == CTX_HOLD_PI);
    assert!(offset_of!(CtxSlot, origin) == CTX_ORIGIN);
    assert!(
        CTX_CALL.is_multiple_of(4) && CTX_ARGS.is_multiple_of(8) && HDR_FREE_HEAD.is_multiple_of(8)
    );
    assert!(region_len(MAX_CTX) <= 65536 + BLK_LEN);
};

/// A CBUF id as it travels between components: `gen:12 | slab:14 | obj:6`.
/// The generation changes each time the buffer is freed, so a freed id
/// (or one reused after reclaim) no longer matches the table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CbufId(pub u32);

pub const CBID_OBJ_BITS: u32 = SLAB_SHIFT;
pub const CBID_SLAB_BITS: u32 = 14;
pub const CBID_GEN_BITS: u32 = 12;
pub const MAX_SLABS: u32 = 1 << CBID_SLAB_BITS;

impl CbufId {
    pub const fn new(gen: u32, slab: u32, obj: u32) -> CbufId {
        CbufId(
            (gen & ((1 << CBID_GEN_BITS) - 1)) << (CBID_SLAB_BITS + CBID_OBJ_BITS)
                | (slab & (MAX_SLABS - 1)) << CBID_OBJ_BITS
                | (obj & (SLAB_OBJS as u32 - 1)),
        )
    }
    pub const fn gen(self) -> u32 {
        self.0 >> (CBID_SLAB_BITS + CBID_OBJ_BITS)
    }
    pub const fn slab(self) -> u32 {
        (self.0 >> CBID_OBJ_BITS) & (MAX_SLABS - 1)
    }
    pub const fn obj(self) -> u32 {
        self.0 & (SLAB_OBJS as u32 - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cbid_round_trips_every_field_value() {
        for gen in 0..(1 << CBID_GEN_BITS) {
            let id = CbufId::new(gen, 5, 7);
            assert_eq!((id.gen(), id.slab(), id.obj()), (gen, 5, 7));
        }
        for slab in 0..MAX_SLABS {
            let id = CbufId::new(3, slab, 63);
            assert_eq!((id.gen(), id.slab(), id.obj()), (3, slab, 63));
        }
        for obj in 0..SLAB_OBJS as u32 {
            let id = CbufId::new(4095, MAX_SLABS - 1, obj);
            assert_eq!((id.gen(), id.slab(), id.obj()), (4095, MAX_SLABS - 1, obj));
        }
    }

    #[test]
    fn slots_follow_the_header() {
        for i in 0..MAX_CTX {
            assert_eq!(slot_off(i) % 64, 0);
            assert!(slot_off(i) + CTX_SIZE <= region_len(MAX_CTX));
        }
    }
}

/// CBUF slab metadata (one memfd per slab, apart from the slab's data
/// memfd, so buffers cannot overwrite it): `SLAB_OBJS` entries of 16 bytes.
/// ```text
/// 0  u32 state_gen  gen << 2 | CB_FREE / CB_ALLOC / CB_REVOKED
/// 4  u32 pi         PI futex word: the holder's tid while allocated
/// 8  u32 holder     tid that allocated it (low 31 bits; pid_max ≤ 2^22)
///                   | CBM_USED: set on every allocation, cleared by the
///                   manager's policy run (Table II's used bits)
/// 12 u32 since_ms   CLOCK_MONOTONIC ms (low 32 bits) when allocated
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CbufMeta {
    pub state_gen: u32,
    pub pi: u32,
    pub holder: u32,
    pub since_ms: u32,
}
pub const CBM_STATE_GEN: usize = 0;
pub const CBM_PI: usize = 4;
pub const CBM_HOLDER: usize = 8;
pub const CBM_SINCE: usize = 12;
pub const CBM_SIZE: usize = 16;
pub const CBM_USED: u32 = 1 << 31;
pub const CB_FREE: u32 = 0;
pub const CB_ALLOC: u32 = 1;
pub const CB_REVOKED: u32 = 2;
pub const CB_STATE_MASK: u32 = 3;
pub const CBUF_META_LEN: usize = 4096;

/// A component's CBUF table (the paper's TMEM index, shared with the CBUF
/// manager): a header, then the 2-level radix table `slab → mapped`.
/// ```text
/// 0   u32 magic (CBUF_MAGIC)   4  u32 version
/// 8   u32 relinquish (REL_CBUF) 12 u32 free_seq (futex, tmem_put)
/// 16  u32 waiters              20 u32 blocks
/// 24  u64 block_ns
/// 32  u64 limit (δ^j in bytes)  40 u64 bytes (slab bytes held): written by
///     the manager, read by the component to go to tmem_get without a
///     round trip when a new slab cannot fit (the manager still checks)
/// 48  u32 nopi (as the region header's)
/// 52  u32 svc_pi: PI word of a request to the CBUF manager: the requester
///     stores svc_tid in it and blocks on it (FUTEX_LOCK_PI), so the
///     manager's service thread runs at the requester's priority until it
///     releases the word after the reply (the paper's thread migration)
/// 56  u32 svc_tid: the service thread's tid (manager writes)  60..64 reserved
/// 64  u32 l1[CB_L1]            leaf number + 1, 0 = none (manager writes)
/// 576 u32 leaves[CB_LEAVES][CB_L2]   1 = slab mapped here, 0 = not
/// 8768 BlockEntry[BLK_ENTRIES]  per-thread block stats (component writes)
/// 9280 BlockEntry[BLK_ENTRIES]  per-thread tardiness: count = jobs done,
///      ns = their summed tardiness (the periodic-task helper writes)
/// ```
pub const CB_L1: usize = 128;
pub const CB_L2: usize = 128;
pub const CB_LEAVES: usize = 16;
pub const CBT_RELINQUISH: usize = 8;
pub const CBT_FREE_SEQ: usize = 12;
pub const CBT_WAITERS: usize = 16;
pub const CBT_BLOCKS: usize = 20;
pub const CBT_BLOCK_NS: usize = 24;
pub const CBT_LIMIT: usize = 32;
pub const CBT_BYTES: usize = 40;
pub const CBT_NOPI: usize = 48;
pub const CBT_SVC_PI: usize = 52;
pub const CBT_SVC_TID: usize = 56;
pub const CBT_L1: usize = 64;
pub const CBT_LEAVES: usize = CBT_L1 + CB_L1 * 4;
pub const CBT_BLK: usize = CBT_LEAVES + CB_LEAVES * CB_L2 * 4;
pub const CBT_TARDY: usize = CBT_BLK + BLK_LEN;
pub const CBUF_TABLE_LEN: usize = CBT_TARDY + BLK_LEN;
/// Smallest CBUF size class (bytes); classes are `CB_MIN << k`.
pub const CB_MIN: usize = 64;
pub const CB_CLASSES: usize = 11;

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<CbufMeta>() == CBM_SIZE);
    assert!(offset_of!(CbufMeta, pi) == CBM_PI);
    assert!(offset_of!(CbufMeta, holder) == CBM_HOLDER);
    assert!(offset_of!(CbufMeta, since_ms) == CBM_SINCE);
    assert!(SLAB_OBJS * CBM_SIZE <= CBUF_META_LEN);
    assert!(CB_L1 * CB_L2 == MAX_SLABS as usize);
    assert!(CBT_LEAVES.is_multiple_of(64) && CBT_BLOCK_NS.is_multiple_of(8));
    assert!(CBT_LIMIT.is_multiple_of(8) && CBT_BYTES == CBT_LIMIT + 8 && CBT_BYTES + 8 <= CBT_L1);
    assert!(CBT_BLK == 8768 && CBT_BLK.is_multiple_of(64));
    assert!(CBT_TARDY == 9280 && CBT_NOPI + 4 == CBT_SVC_PI);
    assert!(CBT_SVC_TID == CBT_SVC_PI + 4 && CBT_SVC_TID + 4 <= CBT_L1);
};
