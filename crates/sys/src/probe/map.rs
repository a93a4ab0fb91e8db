//! Probes of BPF map types: task and socket storage, ring buffer, and an
//! mmapable array written through mmap and read back with a lookup.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::caps::{CAP_BPF, CAP_SYS_ADMIN};
use super::prog::Ctx;
use super::sys;
use super::words::{errno_words, last_errno, ENOTSUPP};
use super::Feature;
use libbpf_rs::MapType;

pub(super) fn probe_map_libbpf(
    id: &'static str,
    name: &'static str,
    map_type: MapType,
    needed_by: &'static str,
    ctx: &Ctx,
) -> Feature {
    // libbpf_probe_bpf_map_type through libbpf-rs. Its error value does not
    // expose the errno, so it is read from errno at once: on Ok(false),
    // libbpf closed its fds after the failed create and successful close(2)
    // calls leave errno alone, so it is the create's; on Err, libbpf (since
    // 1.0, libbpf_err()) set errno to the error it returns.
    let r = map_type.is_supported();
    let errno = last_errno();
    let (available, detail) = if matches!(r, Ok(true)) {
        (true, "map created".to_string())
    } else {
        // Err: libbpf failed before the create (e.g. loading the BTF that
        // storage maps need).
        let what = if r.is_err() {
            "refused while preparing the map"
        } else {
            "refused at creation"
        };
        let e = errno;
        let mut d = format!("{what}: {}", errno_words(e));
        if e == libc::EPERM && !ctx.caps.has(CAP_BPF) && !ctx.caps.has(CAP_SYS_ADMIN) {
            d.push_str(" — needs root or CAP_BPF");
        } else if r.is_ok() && (e == libc::EINVAL || e == ENOTSUPP) {
            d.push_str(" — this kernel does not know this map type");
        }
        (false, d)
    };
    Feature {
        id,
        name: name.into(),
        available,
        detail,
        needed_by,
    }
}

pub(super) fn probe_mmapable_array(ctx: &Ctx) -> Feature {
    let feature = |available, detail| Feature {
        id: "map_mmapable_array",
        name: "BPF mmapable array (BPF_F_MMAPABLE)".into(),
        available,
        detail,
        needed_by: "tags",
    };
    let opts = sys::bpf_map_create_opts {
        sz: std::mem::size_of::<sys::bpf_map_create_opts>() as _,
        map_flags: sys::BPF_F_MMAPABLE,
        ..Default::default()
    };
    // SAFETY: opts is a valid, sized options struct; the name may be NULL.
    let fd =
        unsafe { sys::bpf_map_create(sys::BPF_MAP_TYPE_ARRAY, std::ptr::null(), 4, 8, 1, &opts) };
    if fd < 0 {
        let mut d = format!("refused at creation: {}", errno_words(-fd));
        if -fd == libc::EPERM && !ctx.caps.has(CAP_BPF) && !ctx.caps.has(CAP_SYS_ADMIN) {
            d.push_str(" — needs root or CAP_BPF");
        } else if -fd == libc::EINVAL {
            d.push_str(" — this kernel does not accept BPF_F_MMAPABLE (needs Linux 5.5)");
        }
        return feature(false, d);
    }
    // SAFETY: fd is a new map fd that nothing else owns.
    let map = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    // SAFETY: a fresh shared mapping of the map's one page; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            map.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return feature(
            false,
            format!(
                "map created but mmap refused: {}",
                errno_words(last_errno())
            ),
        );
    }
    const MAGIC: u64 = 0x6d61_6e74_6c65_0001;
    // SAFETY: p points to at least 8 writable, page-aligned bytes (element 0).
    unsafe { std::ptr::write_volatile(p.cast::<u64>(), MAGIC) };
    let key = 0u32;
    let mut val = 0u64;
    // SAFETY: key and val are valid for the map's key and value sizes.
    let r = unsafe {
        sys::bpf_map_lookup_elem(
            map.as_raw_fd(),
            (&key as *const u32).cast(),
            (&mut val as *mut u64).cast(),
        )
    };
    // SAFETY: p/page is exactly the mapping made above.
    unsafe { libc::munmap(p, page) };
    match (r, val) {
        (0, MAGIC) => feature(
            true,
            "created, written through mmap and read back with a lookup".into(),
        ),
        (0, v) => feature(
            false,
            format!("mmap'd write not seen by lookup (read {v:#x})"),
        ),
        (e, _) => feature(false, format!("lookup failed: {}", errno_words(-e))),
    }
}
