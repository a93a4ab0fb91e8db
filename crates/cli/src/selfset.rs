//! Unprivileged `mantle tag run`: the CLI holds no privilege to change its
//! own tags except through the trusted path, the uprobe on the libmantle.so
//! the kernel side watches. So it loads that very library and calls it.

use mantle_tags::Error;
use std::ffi::{c_char, c_int, CString};

type SetFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type StrerrorFn = unsafe extern "C" fn(c_int) -> *const c_char;

pub fn set(name: &str, ttl: u32) -> Result<(), Error> {
    let lib = mantle_tags::kernel::ctl_lib().ok_or(Error::NotLoaded)?;
    let path = CString::new(lib.to_string_lossy().as_bytes())
        .map_err(|_| Error::Invalid("library path".into()))?;
    // SAFETY: dlopen/dlsym with valid C strings; the symbols have the
    // signatures declared in include/mantle/tags.h.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            return Err(Error::Missing(format!("cannot load {}", lib.display())));
        }
        let set = libc::dlsym(h, c"mantle_tag_set".as_ptr());
        let strerror = libc::dlsym(h, c"mantle_strerror".as_ptr());
        if set.is_null() || strerror.is_null() {
            return Err(Error::Missing(format!(
                "{} lacks mantle_tag_set",
                lib.display()
            )));
        }
        let set: SetFn = std::mem::transmute::<*mut libc::c_void, SetFn>(set);
        let strerror: StrerrorFn = std::mem::transmute::<*mut libc::c_void, StrerrorFn>(strerror);
        let cname = CString::new(name).map_err(|_| Error::Invalid("tag name has a NUL".into()))?;
        let rc = set(cname.as_ptr(), ttl as c_int);
        if rc < 0 {
            let msg = std::ffi::CStr::from_ptr(strerror(rc))
                .to_string_lossy()
                .into_owned();
            return Err(match -rc {
                libc::ENOENT => Error::UnknownTag(name.to_string()),
                libc::EPERM => Error::Permission(msg),
                libc::ENODEV => Error::NotLoaded,
                _ => Error::Refused(format!("setting {name}: {msg}")),
            });
        }
    }
    Ok(())
}
