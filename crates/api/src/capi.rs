//! The C ABI of libmantle.so (declared in include/mantle/tags.h). Every
//! function returns 0 or a non-negative value on success and a negative
//! errno on failure; `mantle_strerror` names the error.

use crate::Error;
use std::ffi::{c_char, c_int, CStr};

fn errno_of(e: &Error) -> c_int {
    -match e {
        Error::NotLoaded => libc::ENODEV,
        Error::AlreadyLoaded => libc::EEXIST,
        Error::Missing(_) => libc::ENOSYS,
        Error::UnknownTag(_) => libc::ENOENT,
        Error::Exists(_) => libc::EEXIST,
        Error::TableFull | Error::LifelineFull(_) => libc::ENOSPC,
        Error::Permission(_) => libc::EPERM,
        Error::Invalid(_) => libc::EINVAL,
        Error::NoSuchThread(_) => libc::ESRCH,
        Error::Refused(_) => libc::EXDEV,
        // the kernel's own answer where a system call failed
        Error::Kernel { .. } => e.errno().unwrap_or(libc::EIO),
        Error::Corrupt(_) => libc::EIO,
        Error::Busy(_) => libc::EBUSY,
    }
}

fn ret(r: Result<(), Error>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// # Safety
/// `p` must be NULL or a NUL-terminated string.
unsafe fn name<'a>(p: *const c_char) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(Error::Invalid("NULL tag name".into()));
    }
    // SAFETY: guaranteed by the caller.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error::Invalid("tag name is not UTF-8".into()))
}

#[no_mangle]
pub extern "C" fn mantle_tags_open() -> c_int {
    ret(crate::open())
}

/// Hot path: the first 64 tags of the calling thread (bit i = tag i).
/// Returns 0 when the kernel side is not loaded.
#[no_mangle]
pub extern "C" fn mantle_tags_self() -> u64 {
    crate::my_vector().map(|v| v[0]).unwrap_or(0)
}

/// # Safety
/// `out` must have room for `words` u64.
#[no_mangle]
pub unsafe extern "C" fn mantle_tags_read_self(out: *mut u64, words: u32) -> c_int {
    match crate::my_vector() {
        Ok(v) => {
            let n = (words as usize).min(v.len());
            // SAFETY: caller provides room for `words` >= n values.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, n) };
            v.len() as c_int
        }
        Err(e) => errno_of(&e),
    }
}

/// # Safety
/// `tag` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mantle_tag_lookup(tag: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { name(tag) }.and_then(crate::lookup) {
        Ok(b) => b as c_int,
        Err(e) => errno_of(&e),
    }
}

/// 1 if the calling thread holds `tag`, 0 if not, negative errno on error.
/// # Safety
/// `tag` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mantle_tag_holds(tag: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { name(tag) }.and_then(crate::holds) {
        Ok(h) => h as c_int,
        Err(e) => errno_of(&e),
    }
}

macro_rules! self_call {
    ($fname:ident, $call:expr, $doc:literal) => {
        #[doc = $doc]
        /// # Safety
        /// `tag` is a NUL-terminated string.
        #[no_mangle]
        pub unsafe extern "C" fn $fname(tag: *const c_char, arg: c_int) -> c_int {
            let _ = arg;
            // SAFETY: forwarded contract.
            ret(unsafe { name(tag) }.and_then(|t| $call(t, arg.max(0) as u32)))
        }
    };
}

self_call!(
    mantle_tag_set,
    crate::set,
    "Hold `tag` (arg: TTL, 0 = the tag's default)."
);
self_call!(
    mantle_tag_set_ttl,
    crate::set_ttl,
    "Set the TTL of a held tag (0: stop passing it)."
);
self_call!(
    mantle_tag_clear,
    |t, _| crate::clear(t),
    "Drop `tag` (arg unused)."
);
self_call!(
    mantle_deadlock_begin,
    |t, _| crate::deadlock_begin(t),
    "Start a guarded call chain as its origin: hold deadlock tag `tag` (arg unused)."
);
self_call!(
    mantle_deadlock_end,
    |t, _| crate::deadlock_end(t),
    "End the calling thread's call chain: drop deadlock tag `tag` (arg unused)."
);
self_call!(
    mantle_tag_terminate,
    |t, _| crate::terminate(t),
    "Reject `tag` from now on (arg unused)."
);
self_call!(
    mantle_tag_unterminate,
    |t, _| crate::unterminate(t),
    "Accept `tag` again (arg unused)."
);

pub const MANTLE_TAG_SYSTEM: u32 = 1;
pub const MANTLE_TAG_REPLIES: u32 = 2;
pub const MANTLE_TAG_DEADLOCK: u32 = 4;
pub const MANTLE_TAG_ANYONE: u32 = 8;
pub const MANTLE_TAG_PER_REQUEST: u32 = 16;

/// Create a tag (root). ttl < 0: unlimited. flags: MANTLE_TAG_SYSTEM,
/// MANTLE_TAG_REPLIES, MANTLE_TAG_DEADLOCK, MANTLE_TAG_ANYONE,
/// MANTLE_TAG_PER_REQUEST.
/// Returns the tag's bit.
/// # Safety
/// `tag` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mantle_tag_create(
    tag: *const c_char,
    ttl: c_int,
    flags: u32,
    lifeline: u32,
) -> c_int {
    let opts = crate::CreateOpts {
        ttl: if ttl < 0 {
            None
        } else {
            Some(ttl.min(254) as u8)
        },
        system: flags & MANTLE_TAG_SYSTEM != 0,
        lifeline,
        owner_uid: None,
        replies: flags & MANTLE_TAG_REPLIES != 0,
        deadlock: flags & MANTLE_TAG_DEADLOCK != 0,
        anyone: flags & MANTLE_TAG_ANYONE != 0,
        per_request: flags & MANTLE_TAG_PER_REQUEST != 0,
    };
    // SAFETY: forwarded contract.
    match unsafe { name(tag) }.and_then(|t| crate::create(t, &opts)) {
        Ok(b) => b as c_int,
        Err(e) => errno_of(&e),
    }
}

/// # Safety
/// `tag` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mantle_tag_delete(tag: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    ret(unsafe { name(tag) }.and_then(crate::delete))
}

/// Fills `tids` with up to `n` threads holding `tag` (root); returns the
/// total number of holders.
/// # Safety
/// `tag` is a NUL-terminated string; `tids` has room for `n` values.
#[no_mangle]
pub unsafe extern "C" fn mantle_tag_threads(tag: *const c_char, tids: *mut u32, n: u32) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { name(tag) }.and_then(crate::threads) {
        Ok(v) => {
            for (i, t) in v.iter().take(n as usize).enumerate() {
                // SAFETY: i < n, room guaranteed by the caller.
                unsafe { *tids.add(i) = t.tid };
            }
            v.len() as c_int
        }
        Err(e) => errno_of(&e),
    }
}

/// A static description of a negative return value.
#[no_mangle]
pub extern "C" fn mantle_strerror(err: c_int) -> *const c_char {
    let s: &'static CStr = match -err {
        0 => c"success",
        libc::ENODEV => c"mantle tags kernel side not loaded (mantle tags up)",
        libc::ENOSYS => {
            c"feature missing, or this libmantle.so is not the one the kernel side watches"
        }
        libc::ENOENT => c"unknown tag",
        libc::EEXIST => c"tag already exists",
        libc::ENOSPC => c"tag table or lifeline space full",
        libc::EPERM => c"permission denied",
        libc::EINVAL => c"invalid argument",
        libc::ESRCH => c"no such thread",
        libc::EXDEV => c"refused: class mismatch or terminated tag",
        _ => c"kernel error",
    };
    s.as_ptr()
}
