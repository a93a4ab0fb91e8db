//! The component runtime for C components (`include/mantle/comp.h`): the
//! same calls as mantle_comp's Rust API, over the environment `mantle
//! comp up` gives each component.
//!
//! Mechanism: [`mantle_comp_init`] reads the environment once (regions,
//! CBUF socket and table) into a process-wide state; invocations, serving
//! and CBUF calls use it. Errors are negative errnos (CBUF pointers: NULL
//! with errno set).
//!
//! Invariants: the state is set once and never freed (contexts and
//! buffers point into it); the function table passed to
//! [`mantle_comp_serve`] is copied.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use mantle_abi::comp::{CbufId, NARGS};
use mantle_comp::{Env, Error, Interface};

static ENV: OnceLock<Env> = OnceLock::new();

fn errno_of(e: &Error) -> c_int {
    match e {
        Error::Cbuf(n) | Error::Remote(n) => *n,
        Error::ServerDied(_) => libc::EPIPE,
        Error::Args(_) => libc::E2BIG,
        Error::NotAllowed(..) => libc::EACCES,
        Error::Corrupt(_) => libc::EPROTO,
        Error::Sys(_, io) | Error::Start(_, io) => io.raw_os_error().unwrap_or(libc::EIO),
        Error::Spec(_) | Error::Cycle(_) => libc::EINVAL,
    }
}

fn set_errno(n: c_int) {
    // SAFETY: errno is thread-local; writing it is what C expects.
    unsafe { *libc::__errno_location() = n };
}

/// Reads the component's environment; 0, or -errno (-EINVAL: not started
/// by `mantle comp up`). Idempotent.
#[no_mangle]
pub extern "C" fn mantle_comp_init() -> c_int {
    if ENV.get().is_some() {
        return 0;
    }
    match Env::from_env() {
        Ok(e) => {
            let _ = ENV.set(e);
            0
        }
        Err(e) => -errno_of(&e),
    }
}

/// Invokes function `func` of component `server` with `nargs` (≤ 6)
/// words; the result in `*ret`. 0, or -errno (-EPIPE: the server died,
/// -EACCES: not an allowed server).
///
/// # Safety
/// `server` is a NUL-terminated string; `args` points to `nargs` words;
/// `ret` is writable.
#[no_mangle]
pub unsafe extern "C" fn mantle_comp_invoke(
    server: *const c_char,
    func: u32,
    args: *const u64,
    nargs: usize,
    ret: *mut i64,
) -> c_int {
    let Some(env) = ENV.get() else {
        return -libc::EINVAL;
    };
    if server.is_null() || ret.is_null() || (nargs > 0 && args.is_null()) {
        return -libc::EFAULT;
    }
    if nargs > NARGS {
        return -libc::E2BIG;
    }
    // SAFETY: caller's contract (NUL-terminated).
    let name = unsafe { CStr::from_ptr(server) }.to_string_lossy();
    let a = if nargs == 0 {
        &[][..]
    } else {
        // SAFETY: caller's contract: nargs readable words.
        unsafe { std::slice::from_raw_parts(args, nargs) }
    };
    match env.server(&name).and_then(|s| s.invoke(func, a)) {
        Ok(v) => {
            // SAFETY: caller's contract: ret writable.
            unsafe { *ret = v };
            0
        }
        Err(e) => -errno_of(&e),
    }
}

/// One exported function of a C component.
pub type MantleCompFn = extern "C" fn(args: *const u64) -> i64;

/// Serves `n` functions (ids 0..n) on the component's contexts; does not
/// return unless it fails (-errno).
///
/// # Safety
/// `fns` points to `n` function pointers.
#[no_mangle]
pub unsafe extern "C" fn mantle_comp_serve(fns: *const MantleCompFn, n: usize) -> c_int {
    let Some(env) = ENV.get() else {
        return -libc::EINVAL;
    };
    if fns.is_null() && n > 0 {
        return -libc::EFAULT;
    }
    // SAFETY: caller's contract: n function pointers.
    let table: Vec<MantleCompFn> = unsafe { std::slice::from_raw_parts(fns, n) }.to_vec();
    let mut iface = Interface::new();
    for f in table {
        iface = iface.func(move |a: &[u64; NARGS]| f(a.as_ptr()));
    }
    match env.serve_forever(iface) {
        Ok(()) => 0,
        Err(e) => -errno_of(&e),
    }
}

/// `cbuf_alloc(size, &cbid)`: a buffer of at least `size` bytes, or NULL
/// with errno set.
///
/// # Safety
/// `cbid` is writable.
#[no_mangle]
pub unsafe extern "C" fn mantle_cbuf_alloc(size: usize, cbid: *mut u32) -> *mut c_void {
    let Some(env) = ENV.get() else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    if cbid.is_null() {
        set_errno(libc::EFAULT);
        return std::ptr::null_mut();
    }
    match env.cbufs.alloc(size) {
        Ok((p, id)) => {
            // SAFETY: caller's contract.
            unsafe { *cbid = id.0 };
            p.cast()
        }
        Err(e) => {
            set_errno(errno_of(&e));
            std::ptr::null_mut()
        }
    }
}

/// `cbuf_free(ptr)`: 0, or -EINVAL when ptr is not a buffer this
/// component allocated and still holds.
#[no_mangle]
pub extern "C" fn mantle_cbuf_free(p: *mut c_void) -> c_int {
    let Some(env) = ENV.get() else {
        return -libc::EINVAL;
    };
    match env.cbufs.free(p.cast()) {
        Ok(()) => 0,
        Err(e) => -errno_of(&e),
    }
}

/// `cbuf2buf(cbid, size)`: the buffer a passed cbid names, or NULL with
/// errno (ESTALE: freed or forged; EACCES: not passable to us; ENOENT:
/// no such buffer; ERANGE: smaller than size).
#[no_mangle]
pub extern "C" fn mantle_cbuf2buf(cbid: u32, size: usize) -> *mut c_void {
    let Some(env) = ENV.get() else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    match env.cbufs.cbuf2buf(CbufId(cbid), size) {
        Ok(p) => p.cast(),
        Err(e) => {
            set_errno(errno_of(&e));
            std::ptr::null_mut()
        }
    }
}
