//! What an unprivileged `mantle` does to tags: set one on itself (`tag
//! run`) and delete a tag it owns (`tag delete`). It holds no privilege to
//! change the table or its own tags except through the trusted path, the
//! uprobe on the libmantle.so the kernel side watches. So it loads that very
//! library and calls it, as any program linked with -lmantle would.

use mantle_tags::Error;
use std::ffi::{c_char, c_int, CStr, CString};

type SetFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type DeleteFn = unsafe extern "C" fn(*const c_char) -> c_int;
type StrerrorFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The watched libmantle.so, loaded into this process (kept loaded: the
/// process execs or exits soon after).
struct Lib {
    handle: *mut libc::c_void,
    path: std::path::PathBuf,
}

impl Lib {
    fn open() -> Result<Lib, Error> {
        let path = mantle_tags::kernel::ctl_lib().ok_or(Error::NotLoaded)?;
        let c = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| Error::Invalid("library path".into()))?;
        // SAFETY: dlopen with a valid C string.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(Error::Missing(format!("cannot load {}", path.display())));
        }
        Ok(Lib { handle, path })
    }

    /// The address of `sym`, which the caller casts to its C signature.
    fn sym(&self, sym: &CStr) -> Result<*mut libc::c_void, Error> {
        // SAFETY: dlsym on a live handle with a valid C string.
        let p = unsafe { libc::dlsym(self.handle, sym.as_ptr()) };
        if p.is_null() {
            return Err(Error::Missing(format!(
                "{} lacks {}",
                self.path.display(),
                sym.to_string_lossy()
            )));
        }
        Ok(p)
    }

    /// mantle_strerror's text for a negative errno.
    fn strerror(&self, rc: c_int) -> String {
        match self.sym(c"mantle_strerror") {
            Ok(p) => {
                // SAFETY: the symbol has this signature (include/mantle/tags.h)
                // and returns a static NUL-terminated string.
                unsafe {
                    let f = std::mem::transmute::<*mut libc::c_void, StrerrorFn>(p);
                    CStr::from_ptr(f(rc)).to_string_lossy().into_owned()
                }
            }
            Err(_) => std::io::Error::from_raw_os_error(-rc).to_string(),
        }
    }
}

fn c_name(name: &str) -> Result<CString, Error> {
    CString::new(name).map_err(|_| Error::Invalid("tag name has a NUL".into()))
}

/// Holds tag `name` from now on (this thread, and what it execs).
pub fn set(name: &str, ttl: u32) -> Result<(), Error> {
    let lib = Lib::open()?;
    let f = lib.sym(c"mantle_tag_set")?;
    let cname = c_name(name)?;
    // SAFETY: mantle_tag_set has this signature (include/mantle/tags.h);
    // cname outlives the call.
    let rc = unsafe {
        let f = std::mem::transmute::<*mut libc::c_void, SetFn>(f);
        f(cname.as_ptr(), ttl as c_int)
    };
    if rc < 0 {
        let msg = lib.strerror(rc);
        return Err(match -rc {
            libc::ENOENT => Error::UnknownTag(name.to_string()),
            libc::EPERM => Error::Permission(format!("setting tag {name:?}: {msg}")),
            libc::ENODEV => Error::NotLoaded,
            libc::ENOSYS => Error::Missing(msg),
            _ => Error::Refused(format!("setting {name}: {msg}")),
        });
    }
    Ok(())
}

/// Rejects tag `name` on this thread from now on (and drops it): any thread
/// may refuse any tag for itself.
pub fn terminate(name: &str) -> Result<(), Error> {
    let lib = Lib::open()?;
    let f = lib.sym(c"mantle_tag_terminate")?;
    let cname = c_name(name)?;
    // SAFETY: mantle_tag_terminate has this signature (include/mantle/tags.h,
    // the argument unused); cname outlives the call.
    let rc = unsafe {
        let f = std::mem::transmute::<*mut libc::c_void, SetFn>(f);
        f(cname.as_ptr(), 0)
    };
    if rc < 0 {
        let msg = lib.strerror(rc);
        return Err(match -rc {
            libc::ENOENT => Error::UnknownTag(name.to_string()),
            libc::ENODEV => Error::NotLoaded,
            libc::ENOSYS => Error::Missing(msg),
            _ => Error::Refused(format!("terminating {name}: {msg}")),
        });
    }
    Ok(())
}

/// Deletes tag `name`, which the caller's uid must own: the kernel side
/// checks that on the trusted path and answers EPERM otherwise.
pub fn delete(name: &str) -> Result<(), Error> {
    let lib = Lib::open()?;
    let f = lib.sym(c"mantle_tag_delete")?;
    let cname = c_name(name)?;
    // SAFETY: mantle_tag_delete has this signature (include/mantle/tags.h);
    // cname outlives the call.
    let rc = unsafe {
        let f = std::mem::transmute::<*mut libc::c_void, DeleteFn>(f);
        f(cname.as_ptr())
    };
    if rc < 0 {
        let msg = lib.strerror(rc);
        return Err(match -rc {
            libc::ENOENT => Error::UnknownTag(name.to_string()),
            libc::EPERM => Error::Permission(format!(
                "tag {name:?} is not yours: only root and its owner may delete it"
            )),
            libc::ENODEV => Error::NotLoaded,
            libc::ENOSYS => Error::Missing(msg),
            libc::EINVAL => Error::Invalid(format!("deleting {name:?}: {msg}")),
            _ => Error::Refused(format!("deleting {name:?}: {msg}")),
        });
    }
    Ok(())
}
