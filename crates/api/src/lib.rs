//! mantle-api: the tags API inside applications, as a Rust crate and as
//! `libmantle.so` with the C header `include/mantle/tags.h`.
//!
//! Mechanism:
//! * Reading one's own tags is the hot path (the paper's mode example reads
//!   them before every send): the view map is mapped read-only once and the
//!   caller's tid is cached per thread, so a read is a thread-local load plus
//!   one load from shared memory, no system call.
//! * Changing one's own tags needs no privilege: [`mantle_tag_ctl`] is an
//!   empty function whose entry carries the kernel side's uprobe; the probe
//!   runs in the caller's context, can touch only the caller's own state, and
//!   answers through the caller's view entry (`op_seq`/`op_err`). If the
//!   answer does not come, the probe is not attached to this copy of the
//!   library, and the call says so.
//! * Creating, deleting and changing other threads' tags go through
//!   mantle-tags and need root (a tag's owner may delete it).
//!
//! Invariants: the mapping is made once per process and never unmapped
//! (readers may hold pointers into it); the tid cache is reset in the
//! child after fork. No locks besides the one-time initialisation.

use mantle_abi::tags::{OpCode, View, MT_WORDS};
use mantle_tags::kernel::MappedMap;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Once, OnceLock};

pub use mantle_tags::{CreateOpts, Error, Tags, ThreadInfo};

struct Shared {
    view: MappedMap,
    tags: Tags,
}

/// Set once the kernel side's maps are open; a failed open is not cached
/// (the kernel side may be loaded later).
static SHARED: OnceLock<Shared> = OnceLock::new();
static AT_FORK: Once = Once::new();
/// Bumped in the child after fork: invalidates every cached tid.
static FORK_GEN: AtomicU32 = AtomicU32::new(1);

thread_local! {
    static TID: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
    static SEQ: Cell<u32> = const { Cell::new(0) };
}

extern "C" fn after_fork_child() {
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
}

/// The hot path's check: one load once open. Opening is out of line
/// (`open_shared`), so that callers such as `my_vector` stay a few
/// instructions without the opening's stack frame.
#[inline]
fn shared() -> Result<&'static Shared, Error> {
    match SHARED.get() {
        Some(s) => Ok(s),
        None => open_shared(),
    }
}

#[cold]
#[inline(never)]
fn open_shared() -> Result<&'static Shared, Error> {
    let s = Shared {
        view: mantle_tags::kernel::map_array::<View>("view", false)?,
        tags: Tags::open()?,
    };
    AT_FORK.call_once(|| {
        // SAFETY: registers a plain extern "C" fn that captures nothing
        // and only bumps an atomic (async-signal-safe in the child).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    });
    // Two threads may open at once: one mapping wins, the other is
    // dropped before anybody read through it.
    let _ = SHARED.set(s);
    Ok(SHARED.get().expect("set above"))
}

#[inline(always)]
fn my_tid() -> u32 {
    let gen = FORK_GEN.load(Ordering::Relaxed);
    TID.with(|c| {
        let (tid, g) = c.get();
        if g == gen {
            return tid;
        }
        let tid = mantle_sys::os::gettid();
        c.set((tid, gen));
        tid
    })
}

/// Opens the kernel side's maps (done lazily by every call; call it early
/// to take the cost up front and to learn whether tags are available).
pub fn open() -> Result<(), Error> {
    shared().map(|_| ())
}

/// The calling thread's view entry (a volatile copy: the kernel side
/// changes it with atomic word operations, so each word is consistent).
#[inline]
fn my_view(s: &Shared) -> Result<View, Error> {
    let tid = my_tid() as usize;
    s.view.get::<View>(tid).ok_or_else(|| beyond_view(tid))
}

#[cold]
#[inline(never)]
fn beyond_view(tid: usize) -> Error {
    Error::Invalid(format!("tid {tid} beyond the view"))
}

/// The calling thread's tag vector: the hot path, no system call once open.
#[inline]
pub fn my_vector() -> Result<[u64; MT_WORDS], Error> {
    Ok(my_view(shared()?)?.vec)
}

/// Bit of a live tag.
pub fn lookup(name: &str) -> Result<u32, Error> {
    shared()?.tags.lookup(name)
}

/// Whether the calling thread holds tag `name`.
pub fn holds(name: &str) -> Result<bool, Error> {
    let bit = lookup(name)?;
    let (w, m) = mantle_tags::model::bit(bit);
    Ok(my_vector()?[w] & m != 0)
}

/// The uprobe target. Its body does nothing; the kernel side's probe on its
/// first instruction performs the operation for the calling thread.
#[no_mangle]
#[inline(never)]
pub extern "C" fn mantle_tag_ctl(op: u32, tag: u32, arg: u32, seq: u32) {
    std::hint::black_box((op, tag, arg, seq));
}

/// Performs a self-operation through the uprobe and reads its answer.
fn self_op(code: OpCode, bit: u32, arg: u32) -> Result<(), Error> {
    let s = shared()?;
    let tid = my_tid();
    let seq = SEQ.with(|c| {
        // Start each thread at a value unlikely to be left over in its slot.
        let mut n = c.get();
        if n == 0 {
            n = tid.wrapping_mul(2654435761) ^ std::process::id().rotate_left(16);
        }
        n = n.wrapping_add(1).max(1);
        c.set(n);
        n
    });
    mantle_tag_ctl(code as u32, bit, arg, seq);
    let View {
        op_seq: got,
        op_err: err,
        ..
    } = my_view(s)?;
    if got != seq {
        let lib = mantle_tags::kernel::ctl_lib()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        return Err(Error::Missing(format!(
            "the self-operation probe did not answer: this process does not use the libmantle.so that `mantle tags up` attached to ({lib})"
        )));
    }
    if err != 0 {
        return Err(mantle_tags::op_error(-err, ""));
    }
    Ok(())
}

/// Holds tag `name` from now on (ttl 0: the tag's default).
pub fn set(name: &str, ttl: u32) -> Result<(), Error> {
    self_op(OpCode::Set, lookup(name)?, ttl)
}
/// Drops tag `name`.
pub fn clear(name: &str) -> Result<(), Error> {
    self_op(OpCode::Clear, lookup(name)?, 0)
}
/// Rejects tag `name` from now on (and drops it).
pub fn terminate(name: &str) -> Result<(), Error> {
    self_op(OpCode::Term, lookup(name)?, 0)
}
/// Stops rejecting tag `name`.
pub fn unterminate(name: &str) -> Result<(), Error> {
    self_op(OpCode::Unterm, lookup(name)?, 0)
}
/// Sets the TTL of a held tag; 0 stops passing it on.
pub fn set_ttl(name: &str, ttl: u32) -> Result<(), Error> {
    self_op(OpCode::Ttl, lookup(name)?, ttl)
}
/// Starts a guarded synchronous call chain (paper, section 5.3): the
/// calling thread takes deadlock tag `name` (created by an administrator
/// with `mantle tag create NAME --deadlock`) as the chain's origin. Its
/// requests pass it on; a request that would reach a thread holding it is
/// reported (and refused with EDEADLK where the kernel has a deny point).
pub fn deadlock_begin(name: &str) -> Result<(), Error> {
    let s = shared()?;
    let bit = s.tags.lookup(name)?;
    if !s.tags.info(bit)?.deadlock {
        return Err(Error::Invalid(format!(
            "tag {name:?} is not a deadlock tag (create it with --deadlock)"
        )));
    }
    self_op(OpCode::Set, bit, 0)
}
/// Ends the calling thread's call chain: drops deadlock tag `name`.
pub fn deadlock_end(name: &str) -> Result<(), Error> {
    clear(name)
}
/// Whether the self-operation path works for this process.
pub fn ping() -> Result<(), Error> {
    self_op(OpCode::Ping, 0, 0)
}
/// Creates a tag (root).
pub fn create(name: &str, opts: &CreateOpts) -> Result<u32, Error> {
    Ok(shared()?.tags.create(name, opts)?.bit)
}
/// Deletes a tag: root directly; its owner through the kernel side.
pub fn delete(name: &str) -> Result<(), Error> {
    let s = shared()?;
    if mantle_sys::os::privileged() {
        return s.tags.delete(name);
    }
    self_op(OpCode::Delete, s.tags.lookup(name)?, 0)?;
    s.tags.sweep()
}
/// Threads holding `name` (root).
pub fn threads(name: &str) -> Result<Vec<ThreadInfo>, Error> {
    shared()?.tags.threads(Some(name))
}

pub mod capi;
pub mod chan;
pub mod comp;
pub mod exec;
