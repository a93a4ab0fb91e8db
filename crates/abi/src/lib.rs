//! mantle-abi: every layout mantle shares across a protection boundary, in
//! one crate that makes no system calls.
//!
//! In a nutshell: the eBPF kernel side, the tools and the applications'
//! library exchange fixed-width C structs through BPF maps, ring buffers and
//! program contexts. Each such struct has exactly one C definition (the
//! header beside its `.bpf.c`) and exactly one Rust mirror, here. So do
//! the executive's shared pages (the fast path's region, [`exec`]) and the
//! component runtime's invocation regions and CBUF tables ([`comp`]).
//!
//! Design principles:
//! 1. **One definition per side.** C: `crates/<subsystem>/src/bpf/<x>.h`.
//!    Rust: one module here ([`tags`], [`prof`], [`offcpu`], [`exec`], [`comp`]; the
//!    components' layouts have no C header, C reaches them through
//!    libmantle). Nobody else declares a
//!    shared struct, enum, flag or errno.
//! 2. **Numbers are generated, structs are checked.** Every integer
//!    `#define` and `enum` member of the headers becomes a Rust constant at
//!    build time (`build.rs`), so a value is written once. Structs are
//!    written out in Rust (so that they read well and derive zerocopy's
//!    traits) and checked three ways: `const` size and offset assertions
//!    here, `_Static_assert`s in the header, and the `layout` tests of the
//!    subsystem crates, which compare every field's offset with the BTF of
//!    the compiled eBPF object.
//! 3. **Reading shared memory is parsing.** Bytes from a map, a ring buffer
//!    or a file are a claim: [`read`] returns an error for a short buffer
//!    instead of panicking, and every struct is `FromBytes` (any bit pattern
//!    is a value), so a corrupted value is a wrong value, never undefined
//!    behaviour. Enum-typed fields are kept as integers and decoded with
//!    fallible conversions.
//! 4. **No system calls, no allocation-heavy dependencies.** The crate is
//!    linked into `libmantle.so`; it must stay small.
//!
//! Where each layout lives:
//!
//! | what                                   | C header                    | Rust        |
//! |----------------------------------------|-----------------------------|-------------|
//! | tags: view, ctl, tag table, lifeline, ops, admin, deadlock reports | `crates/tags/src/bpf/tags.h` | [`tags`] |
//! | profiler: sample key, sample-path counters | `crates/prof/src/bpf/prof.h` | [`prof`] |
//! | profiler's off-CPU path: block key and value, counters, control | `crates/prof/src/bpf/offcpu.h` | [`offcpu`] |
//! | executive ↔ guest: the fast path's region header and per-thread slots | `crates/exec/stub/fast.h` | [`exec`] |
//! | application thread ↔ bootstrap thread (`run --offload`): the shared area of Figure 4.3 | `crates/offload/lib/offload.h` | [`offload`] |
//! | manager ↔ component: invocation regions, slots, CBUF tables and slab metadata, cbids | — (Rust only; C via libmantle) | [`comp`] |
//! | pin paths, lock and note files         | —                           | [`paths`]   |
//!
//! No locks.

pub mod comp;
pub mod exec;
pub mod offcpu;
pub mod offload;
pub mod paths;
pub mod prof;
pub mod tags;

pub use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A buffer too short for the struct it should hold: the other side wrote
/// a different layout (a different `MT_TAGS`, an older mantle) or the data
/// is corrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShortRead {
    /// The C name of the struct.
    pub what: &'static str,
    pub need: usize,
    pub got: usize,
}

impl std::fmt::Display for ShortRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "struct {} needs {} bytes, got {} (layout mismatch or corrupted data)",
            self.what, self.need, self.got
        )
    }
}

impl std::error::Error for ShortRead {}

/// Copies a `T` out of the first `size_of::<T>()` bytes of `b` (any
/// alignment). `what` names the struct in the error.
pub fn read<T: FromBytes>(b: &[u8], what: &'static str) -> Result<T, ShortRead> {
    T::read_from_prefix(b)
        .map(|(v, _)| v)
        .map_err(|_| ShortRead {
            what,
            need: std::mem::size_of::<T>(),
            got: b.len(),
        })
}

/// A NUL-padded C string field as a Rust string (lossy: a corrupted name
/// prints with replacement characters, it does not fail).
pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `const` check that a field sits at a given byte offset (used beside
/// every struct: a reordering on the Rust side fails the build).
#[macro_export]
#[doc(hidden)]
macro_rules! offsets {
    ($t:ty: $($f:ident @ $o:expr),* $(,)?) => {
        $(const _: () = assert!(::core::mem::offset_of!($t, $f) == $o);)*
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_are_errors_for_every_length() {
        let buf = [0xa5u8; 72];
        for n in 0..72 {
            let e = read::<tags::Admin>(&buf[..n], "mt_admin").unwrap_err();
            assert_eq!((e.need, e.got), (72, n));
        }
        let a = read::<tags::Admin>(&buf, "mt_admin").unwrap();
        assert_eq!(a.code, 0xa5a5_a5a5);
    }

    #[test]
    fn cstr_stops_at_nul_and_survives_garbage() {
        assert_eq!(cstr(b"abc\0def"), "abc");
        assert_eq!(cstr(b"abc"), "abc");
        assert_eq!(cstr(&[0xff, b'x', 0]), "\u{fffd}x");
    }
}
