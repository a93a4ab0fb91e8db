//! bpf(2) on pinned objects: maps opened read-only or read-write, mmapped
//! arrays, syscall programs run once, links created and pinned, program
//! ids walked, task iterators read.
//!
//! Loading an object is libbpf-rs's job (skeletons); this module serves
//! what comes after: tools and applications that reach a kernel side
//! through its pins in bpffs. Every function returns `io::Error` with the
//! errno of the failing call; callers add what they were doing.
//!
//! Invariants:
//! * A [`MappedMap`] checks its entry size against the map's `value_size`
//!   before mapping (a kernel side loaded by another build may lay its
//!   structs out differently), and never hands out a reference into the
//!   mapping: BPF programs change it concurrently, so entries are copied
//!   out with volatile reads ([`MappedMap::get`]) or touched through
//!   atomics built from raw pointers ([`MappedMap::atomic_u64`]).
//! * Buffers handed to the kernel are sized from the Rust type and the
//!   map's geometry is checked first, so the kernel never writes past them.
//!
//! Security: on Linux >= 6.4 any user may `BPF_OBJ_GET` a pin its mode
//! lets it open; a read-only open (`BPF_F_RDONLY`) gives a read-only fd,
//! and only frozen maps stay safe from holders of a read-write fd. The
//! callers decide which pins are public (crates/tags kernel.rs).
//!
//! No locks.

use libbpf_rs::libbpf_sys;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use zerocopy::{FromBytes, Immutable, IntoBytes};

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a pin path"))
}

/// A libbpf return value (`-errno` or a new fd) as a result.
fn check(rc: i32) -> io::Result<i32> {
    if rc < 0 {
        Err(io::Error::from_raw_os_error(-rc))
    } else {
        Ok(rc)
    }
}

fn owned(fd: i32) -> io::Result<OwnedFd> {
    let fd = check(fd)?;
    // SAFETY: a non-negative return of a bpf(2) call that creates an fd is
    // a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the pinned object at `path` (`BPF_OBJ_GET`), read-only or
/// read-write.
pub fn obj_get(path: &Path, write: bool) -> io::Result<OwnedFd> {
    let c = cpath(path)?;
    let opts = libbpf_sys::bpf_obj_get_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_obj_get_opts>() as _,
        file_flags: if write { 0 } else { libbpf_sys::BPF_F_RDONLY },
        ..Default::default()
    };
    // SAFETY: c is a NUL-terminated path and opts a valid, sized struct,
    // both live for the call.
    owned(unsafe { libbpf_sys::bpf_obj_get_opts(c.as_ptr(), &opts) })
}

/// Pins `fd` (a map, program or link) at `path` (`BPF_OBJ_PIN`).
pub fn obj_pin(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: valid fd and NUL-terminated path.
    check(unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) }).map(drop)
}

/// Freezes a map: no system call may write it any more (programs still
/// can). Since Linux 5.2.
pub fn map_freeze(map: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain call on a valid fd.
    check(unsafe { libbpf_sys::bpf_map_freeze(map.as_raw_fd()) }).map(drop)
}

/// Attaches a BTF-typed tracepoint program (`tp_btf`/raw tracepoint): the
/// returned fd is the link.
pub fn raw_tracepoint_open(prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: valid program fd; a NULL name means "the program's own
    // attach target" (BTF-typed tracepoints).
    owned(unsafe { libbpf_sys::bpf_raw_tracepoint_open(std::ptr::null(), prog.as_raw_fd()) })
}

/// Creates a link attaching `prog` to `target` (a cgroup fd, …) as
/// `attach_type` (`BPF_LINK_CREATE`).
pub fn link_create(
    prog: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    attach_type: libbpf_sys::bpf_attach_type,
) -> io::Result<OwnedFd> {
    // SAFETY: valid fds; NULL opts.
    owned(unsafe {
        libbpf_sys::bpf_link_create(
            prog.as_raw_fd(),
            target.as_raw_fd(),
            attach_type,
            std::ptr::null(),
        )
    })
}

/// Runs a `BPF_PROG_TYPE_SYSCALL` program once with `ctx` as its context
/// (`BPF_PROG_RUN`) and returns its return value. The program may write
/// the context back; `ctx` receives what it wrote.
pub fn prog_run<T: FromBytes + IntoBytes>(prog: BorrowedFd<'_>, ctx: &mut T) -> io::Result<i32> {
    let bytes = ctx.as_mut_bytes();
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        ctx_in: bytes.as_mut_ptr().cast(),
        ctx_size_in: bytes.len() as u32,
        ..Default::default()
    };
    // SAFETY: valid program fd; opts points at ctx's bytes, which live and
    // stay borrowed for the call.
    check(unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) })?;
    Ok(opts.retval as i32)
}

/// Ids of the loaded programs named `name` (walks every id: needs
/// CAP_SYS_ADMIN; programs freed during the walk are skipped).
pub fn prog_ids_named(name: &str) -> Vec<u32> {
    let mut ids = Vec::new();
    let mut id = 0u32;
    // SAFETY: out-pointer to a local; the walk ends with an error after
    // the last id.
    while unsafe { libbpf_sys::bpf_prog_get_next_id(id, &mut id) } == 0 {
        // SAFETY: plain id lookup; a negative result is an errno.
        let Ok(fd) = owned(unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) }) else {
            continue;
        };
        let mut info = libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: info/len point at a local of the size given.
        let rc =
            unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
        let n = info.name.map(|c| c as u8);
        let end = n.iter().position(|&c| c == 0).unwrap_or(n.len());
        if rc == 0 && &n[..end] == name.as_bytes() {
            ids.push(id);
        }
    }
    ids
}

/// (key_size, value_size, max_entries) of the map behind `fd`.
pub fn map_geometry(fd: BorrowedFd<'_>) -> io::Result<(u32, u32, u32)> {
    let mut info = libbpf_sys::bpf_map_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
    // SAFETY: info/len point at a local of the size given.
    check(unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) })?;
    Ok((info.key_size, info.value_size, info.max_entries))
}

/// (run_time_ns, run_cnt) of the program behind `fd`: counted while
/// [`enable_stats`] (or the sysctl kernel.bpf_stats_enabled) is on.
pub fn prog_run_stats(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info/len point at a local of the size given.
    check(unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) })?;
    Ok((info.run_time_ns, info.run_cnt))
}

/// Turns on the kernel's per-program run-time statistics while the
/// returned fd lives (`BPF_ENABLE_STATS`, Linux 5.8).
pub fn enable_stats() -> io::Result<OwnedFd> {
    // SAFETY: no pointers.
    owned(unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) })
}

/// The number of possible CPUs (the stride of per-CPU map values).
pub fn possible_cpus() -> io::Result<usize> {
    // SAFETY: no arguments; returns the count or -errno.
    check(unsafe { libbpf_sys::libbpf_num_possible_cpus() }).map(|n| n as usize)
}

/// A pinned map opened by path, with its fd and geometry.
pub struct PinnedMap {
    fd: OwnedFd,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
}

impl PinnedMap {
    /// Opens the map pinned at `path`, read-only unless `write`.
    pub fn open(path: &Path, write: bool) -> io::Result<PinnedMap> {
        let fd = obj_get(path, write)?;
        let (key_size, value_size, max_entries) = map_geometry(fd.as_fd())?;
        Ok(PinnedMap {
            fd,
            key_size,
            value_size,
            max_entries,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Refuses a key or value type of another size than the map's: the
    /// kernel copies `value_size` bytes whatever buffer it is given.
    fn geometry<K>(&self, value_size: usize) -> io::Result<()> {
        if std::mem::size_of::<K>() != self.key_size as usize
            || value_size != self.value_size as usize
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "map entries of {}+{} bytes, expected {}+{}",
                    self.key_size,
                    self.value_size,
                    std::mem::size_of::<K>(),
                    value_size
                ),
            ));
        }
        Ok(())
    }

    /// The value under `key`, `None` if there is none.
    pub fn lookup<K, V>(&self, key: &K) -> io::Result<Option<V>>
    where
        K: IntoBytes + Immutable,
        V: FromBytes + IntoBytes,
    {
        self.geometry::<K>(std::mem::size_of::<V>())?;
        let mut v = V::new_zeroed();
        // SAFETY: key and value buffers have the map's key and value sizes
        // (checked above) and live for the call.
        let rc = unsafe {
            libbpf_sys::bpf_map_lookup_elem(
                self.fd.as_raw_fd(),
                key.as_bytes().as_ptr().cast(),
                v.as_mut_bytes().as_mut_ptr().cast(),
            )
        };
        match rc {
            0 => Ok(Some(v)),
            e if e == -libc::ENOENT => Ok(None),
            e => Err(io::Error::from_raw_os_error(-e)),
        }
    }

    /// Entry `key` of a per-CPU array whose values are structs of u64
    /// counters, summed over the possible CPUs.
    pub fn percpu_sum<V: FromBytes + IntoBytes>(&self, key: u32) -> io::Result<V> {
        self.geometry::<u32>(std::mem::size_of::<V>())?;
        let stride = std::mem::size_of::<V>().next_multiple_of(8);
        let mut buf = vec![0u8; stride * possible_cpus()?];
        // SAFETY: buf holds one value (rounded to 8 bytes) per possible
        // CPU, which is what the kernel writes for a per-CPU map.
        check(unsafe {
            libbpf_sys::bpf_map_lookup_elem(
                self.fd.as_raw_fd(),
                (&key as *const u32).cast(),
                buf.as_mut_ptr().cast(),
            )
        })?;
        let mut sum = V::new_zeroed();
        for cpu in buf.chunks_exact(stride) {
            for (s, w) in sum
                .as_mut_bytes()
                .chunks_exact_mut(8)
                .zip(cpu.chunks_exact(8))
            {
                let t = u64::from_ne_bytes((&*s).try_into().expect("8-byte chunk"))
                    .wrapping_add(u64::from_ne_bytes(w.try_into().expect("8-byte chunk")));
                s.copy_from_slice(&t.to_ne_bytes());
            }
        }
        Ok(sum)
    }

    /// Writes `val` under `key` (`BPF_ANY`).
    pub fn update<K, V>(&self, key: &K, val: &V) -> io::Result<()>
    where
        K: IntoBytes + Immutable,
        V: IntoBytes + Immutable,
    {
        self.geometry::<K>(std::mem::size_of::<V>())?;
        // SAFETY: as for lookup; the kernel only reads both buffers.
        check(unsafe {
            libbpf_sys::bpf_map_update_elem(
                self.fd.as_raw_fd(),
                key.as_bytes().as_ptr().cast(),
                val.as_bytes().as_ptr().cast(),
                0,
            )
        })
        .map(drop)
    }
}

/// A `BPF_F_MMAPABLE` array map mapped into this process.
pub struct MappedMap {
    map: PinnedMap,
    base: *mut u8,
    len: usize,
    stride: usize,
}

// SAFETY: the mapping is process-wide shared memory, valid until drop; it
// is only read with volatile copies or through atomics, never through
// references, so sharing the pointer between threads is sound.
unsafe impl Send for MappedMap {}
// SAFETY: as for Send: no references into the mapping are ever made.
unsafe impl Sync for MappedMap {}

impl MappedMap {
    /// Maps the array pinned at `path` whose entries are `entry` bytes,
    /// readable (and writable if `write`). A different `value_size` is an
    /// `InvalidData` error naming both sizes.
    pub fn open(path: &Path, entry: usize, write: bool) -> io::Result<MappedMap> {
        // mmap(MAP_SHARED) of a file opened read-only loses VM_SHARED, which
        // bpf_map_mmap refuses (EINVAL): even a read-only mapping needs an
        // fd opened for writing. Frozen maps stay unwritable: the kernel
        // refuses PROT_WRITE mappings of them (bpf_map_mmap, VM_MAYWRITE).
        let map = PinnedMap::open(path, true)?;
        if map.value_size as usize != entry {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("entries of {} bytes, expected {entry}", map.value_size),
            ));
        }
        let stride = (map.value_size as usize).next_multiple_of(8);
        let page = crate::os::page_size();
        let len = (stride * map.max_entries as usize).div_ceil(page) * page;
        let prot = libc::PROT_READ | if write { libc::PROT_WRITE } else { 0 };
        // SAFETY: mapping an mmapable array fd from offset 0 for the pages
        // that cover its entries; the kernel checks the rest.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                map.fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(MappedMap {
            map,
            base: p.cast(),
            len,
            stride,
        })
    }

    pub fn entries(&self) -> usize {
        self.map.max_entries as usize
    }

    /// Raw pointer to entry `i` viewed as a `T`, or `None` out of bounds
    /// (index, or a `T` larger than an entry). Dereferencing it is the
    /// caller's business: the memory changes under it.
    pub fn ptr<T>(&self, i: usize) -> Option<*mut T> {
        if i >= self.entries() || std::mem::size_of::<T>() > self.stride {
            return None;
        }
        // SAFETY: i < entries, so the offset stays inside the mapping.
        Some(unsafe { self.base.add(i * self.stride).cast() })
    }

    /// A copy of entry `i`, or `None` out of bounds.
    pub fn get<T: FromBytes>(&self, i: usize) -> Option<T> {
        let p = self.ptr::<T>(i)?;
        // SAFETY: in bounds and aligned (entries are 8-byte aligned in a
        // page-aligned mapping, T's alignment is at most 8); any bit
        // pattern is a T (FromBytes); volatile because BPF programs write
        // the memory concurrently.
        Some(unsafe { std::ptr::read_volatile(p) })
    }

    /// The u64 at byte `offset` of entry `i` as an atomic, for words the
    /// kernel side also changes atomically. `None` out of bounds or
    /// misaligned.
    pub fn atomic_u64(&self, i: usize, offset: usize) -> Option<&AtomicU64> {
        if !offset.is_multiple_of(8) || offset + 8 > self.stride {
            return None;
        }
        let p = self.ptr::<u8>(i)?;
        // SAFETY: in bounds (checked), 8-byte aligned (stride and offset
        // are multiples of 8 in a page-aligned mapping), valid for the
        // life of &self; all concurrent access to the word is atomic (the
        // kernel side uses atomic instructions on it), which is what
        // AtomicU64::from_ptr requires.
        Some(unsafe { AtomicU64::from_ptr(p.add(offset).cast()) })
    }
}

impl Drop for MappedMap {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned; nothing borrows
        // the mapping past &self.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Reads a pinned iterator link: each read(2) runs the program over its
/// objects; the records it wrote, as `T`s. A trailing partial record is
/// an `InvalidData` error (the program and `T` disagree on the layout).
pub fn read_iter<T: FromBytes>(link: &Path) -> io::Result<Vec<T>> {
    let buf = std::fs::read(link)?;
    let n = std::mem::size_of::<T>();
    if n == 0 || buf.len() % n != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} bytes are not whole records of {n}", buf.len()),
        ));
    }
    Ok(buf
        .chunks_exact(n)
        .filter_map(|c| T::read_from_bytes(c).ok())
        .collect())
}
