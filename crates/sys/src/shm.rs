//! Memory shared with other processes: a memfd mapped `MAP_SHARED`, whose
//! fd is handed to them (inherited, or passed over a socket). Used by the
//! executive's fast path (crates/exec/src/fast) for its slots.
//!
//! Invariants: the other side writes the same memory concurrently and is
//! not trusted, so nothing hands out a reference to plain data in the
//! mapping: every access is an atomic of one aligned word (or byte), and
//! an atomic read of garbage is just a wrong value to validate. Accessors
//! check bounds and alignment and return `None` otherwise.
//!
//! No locks.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

/// A shared mapping of a memfd of its own.
pub struct SharedMem {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is valid until Drop and only reached through atomics
// (see the module doc), so any thread may own or share it.
unsafe impl Send for SharedMem {}
// SAFETY: as for Send: every access is atomic.
unsafe impl Sync for SharedMem {}

impl SharedMem {
    /// A new memfd of `len` bytes (zeroed, close-on-exec) named `name`
    /// (shown in /proc/PID/maps), mapped read-write and shared.
    pub fn create(name: &CStr, len: usize) -> io::Result<SharedMem> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty shared memory",
            ));
        }
        // SAFETY: a NUL-terminated name and plain flags. Sealing allowed,
        // so that an owner may fix the size ([`SharedMem::seal_size`]).
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our own fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // a fresh shared mapping of our memfd, of its full size
        SharedMem::mapped(fd, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// `len` bytes of `fd` mapped shared with `prot`, owned from now on.
    fn mapped(fd: OwnedFd, len: usize, prot: i32) -> io::Result<SharedMem> {
        // SAFETY: a fresh shared mapping of len bytes of fd (the callers
        // checked the file is that long); no Rust reference to it exists.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMem {
            fd,
            base: p.cast(),
            len,
        })
    }

    /// Seals the memfd's size for good (F_SEAL_SHRINK, F_SEAL_GROW,
    /// F_SEAL_SEAL). Why: a process given the fd could otherwise truncate
    /// it, and the next access to the lost pages through this mapping
    /// would kill this process with SIGBUS (a guest of the executive's fast
    /// path holds the fd). Sealed, ftruncate fails with EPERM for everyone.
    pub fn seal_size(&self) -> io::Result<()> {
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on our own fd with integer arguments.
        if unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Seals the memfd's size and all writes but those through mappings
    /// that exist now (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_FUTURE_WRITE,
    /// F_SEAL_SEAL): this mapping stays writable; anyone given the fd can
    /// map it read-only only (a writable shared mmap, write(2), and an
    /// mprotect to writable fail), however they reopen it. Why: a page the
    /// owner writes and others may only read (a channel's ctl page).
    pub fn seal_read_only_for_others(&self) -> io::Result<()> {
        let seals =
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on our own fd with integer arguments.
        if unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Maps `len` bytes of a memfd received from another process (shared,
    /// read-write). The size is checked against the file: a short file
    /// would fault (SIGBUS) on access instead of failing here.
    pub fn map(fd: OwnedFd, len: usize) -> io::Result<SharedMem> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty shared memory",
            ));
        }
        let size = std::fs::File::from(fd.try_clone()?).metadata()?.len();
        if size < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("shared memory of {size} bytes, {len} expected"),
            ));
        }
        // a file at least len long
        SharedMem::mapped(fd, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Maps `len` bytes of a memfd read-only (shared): for a fd opened
    /// O_RDONLY, which the kernel refuses to map writable.
    pub fn map_readonly(fd: OwnedFd, len: usize) -> io::Result<SharedMem> {
        // writes through the atomics would fault, so callers only load
        SharedMem::mapped(fd, len, libc::PROT_READ)
    }

    /// The mapping's first byte, for memory handed to applications as
    /// buffers (CBUFs): they write it with plain stores, knowing that
    /// another process may too.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Punches a hole of `len` bytes at `off` in the memfd
    /// (fallocate PUNCH_HOLE|KEEP_SIZE): the pages go back to the system
    /// and read as zeros afterwards, in every process mapping them.
    pub fn punch_hole(&self, off: usize, len: usize) -> io::Result<()> {
        if off.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: fallocate on our own fd; no memory is passed.
        let r = unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                len as libc::off_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Bytes of the memfd backed by memory now (st_blocks × 512).
    pub fn resident_bytes(&self) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        let f = std::fs::File::from(self.fd.try_clone()?);
        Ok(f.metadata()?.blocks() * 512)
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn ptr(&self, off: usize, size: usize) -> Option<*mut u8> {
        (off.checked_add(size)? <= self.len && off.is_multiple_of(size))
            // SAFETY: off + size <= len: inside the mapping.
            .then(|| unsafe { self.base.add(off) })
    }

    /// The byte at `off`, if inside.
    pub fn u8(&self, off: usize) -> Option<&AtomicU8> {
        // SAFETY: in bounds; valid for the life of &self; every access to
        // the mapping is atomic.
        self.ptr(off, 1).map(|p| unsafe { AtomicU8::from_ptr(p) })
    }

    /// The aligned u32 at `off`, if inside.
    pub fn u32(&self, off: usize) -> Option<&AtomicU32> {
        // SAFETY: in bounds and 4-aligned (the mapping is page-aligned);
        // valid for the life of &self; every access is atomic.
        self.ptr(off, 4)
            .map(|p| unsafe { AtomicU32::from_ptr(p.cast()) })
    }

    /// The aligned u64 at `off`, if inside.
    pub fn u64(&self, off: usize) -> Option<&AtomicU64> {
        // SAFETY: as u32, 8-aligned.
        self.ptr(off, 8)
            .map(|p| unsafe { AtomicU64::from_ptr(p.cast()) })
    }

    /// Copies `out.len()` bytes at `off` into `out`, eight at a time
    /// through atomic loads (another process may be writing them: `out`
    /// gets some value of each word, never a torn pointer into Rust);
    /// false if they are not inside.
    pub fn copy_out(&self, off: usize, out: &mut [u8]) -> bool {
        if off.checked_add(out.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        // SAFETY: off + out.len() <= len: inside the mapping.
        let src = unsafe { self.base.add(off) };
        let n = out.len();
        let head = src.align_offset(8).min(n);
        let (a, rest) = out.split_at_mut(head);
        let mut words = rest.chunks_exact_mut(8);
        for (k, b) in a.iter_mut().enumerate() {
            // SAFETY: inside the mapping (checked above); bytes are atomics.
            *b = unsafe { AtomicU8::from_ptr(src.add(k)) }.load(Relaxed);
        }
        for (k, w) in (&mut words).enumerate() {
            // SAFETY: inside and 8-aligned (head skipped to alignment).
            let v = unsafe { AtomicU64::from_ptr(src.add(head + 8 * k).cast()) }.load(Relaxed);
            w.copy_from_slice(&v.to_le_bytes());
        }
        let done = head + (n - head) / 8 * 8;
        for (k, b) in words.into_remainder().iter_mut().enumerate() {
            // SAFETY: inside the mapping.
            *b = unsafe { AtomicU8::from_ptr(src.add(done + k)) }.load(Relaxed);
        }
        true
    }

    /// Stores `bytes` at `off`, eight at a time where aligned (atomic
    /// stores: another process may be reading); false if they do not fit.
    pub fn copy_in(&self, off: usize, bytes: &[u8]) -> bool {
        if off.checked_add(bytes.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        // SAFETY: off + bytes.len() <= len: inside the mapping.
        let dst = unsafe { self.base.add(off) };
        let head = dst.align_offset(8).min(bytes.len());
        let (a, rest) = bytes.split_at(head);
        let words = rest.chunks_exact(8);
        for (k, &b) in a.iter().enumerate() {
            // SAFETY: inside the mapping; bytes are atomics.
            unsafe { AtomicU8::from_ptr(dst.add(k)) }.store(b, Relaxed);
        }
        let tail = words.remainder();
        for (k, w) in words.enumerate() {
            let mut v = [0u8; 8];
            v.copy_from_slice(w);
            // SAFETY: inside and 8-aligned.
            unsafe { AtomicU64::from_ptr(dst.add(head + 8 * k).cast()) }
                .store(u64::from_le_bytes(v), Relaxed);
        }
        let done = head + (bytes.len() - head) / 8 * 8;
        for (k, &b) in tail.iter().enumerate() {
            // SAFETY: inside the mapping.
            unsafe { AtomicU8::from_ptr(dst.add(done + k)) }.store(b, Relaxed);
        }
        true
    }

    /// Stores `bytes` at `off` byte by byte (atomically each: another
    /// process may be reading); false if they do not fit.
    pub fn write_bytes(&self, off: usize, bytes: &[u8]) -> bool {
        if off
            .checked_add(bytes.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        for (k, &b) in bytes.iter().enumerate() {
            if let Some(a) = self.u8(off + k) {
                a.store(b, std::sync::atomic::Ordering::Relaxed);
            }
        }
        true
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: base/len are our mapping; no reference into it outlives
        // self (every accessor borrows self).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// FUTEX_WAIT on a word shared with other processes while it holds `val`,
/// at most `timeout`; true if the time ran out.
pub fn futex_wait(word: &AtomicU32, val: u32, timeout: std::time::Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: word is a valid aligned u32 for the duration of the call; ts
    // lives on the stack. Shared futex (no PRIVATE flag): the other side
    // is another process.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            val,
            &ts as *const libc::timespec,
        )
    };
    r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
}

/// FUTEX_WAKE one waiter of a word shared with other processes.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: word is a valid aligned u32; FUTEX_WAKE reads nothing else.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1) };
}

/// FUTEX_WAKE every waiter of a word shared with other processes.
pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: word is a valid aligned u32; FUTEX_WAKE reads nothing else.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

/// The CPU this thread runs on now (getcpu through the vDSO; a hint, it
/// may have moved by the time it is used); None if unknown.
pub fn current_cpu() -> Option<u32> {
    // SAFETY: no arguments; returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors_check_bounds_and_alignment() {
        let m = SharedMem::create(c"mantle-test", 4096).unwrap();
        assert!(m.u64(4088).is_some() && m.u64(4089).is_none() && m.u64(4096).is_none());
        assert!(m.u32(4092).is_some() && m.u32(2).is_none());
        assert!(m.u8(4095).is_some() && m.u8(4096).is_none());
        assert!(m.u64(usize::MAX - 3).is_none());
        m.u64(8).unwrap().store(7, Relaxed);
        assert_eq!(m.u32(8).unwrap().load(Relaxed), 7);
        assert!(m.write_bytes(4090, b"abcdef"));
        assert!(!m.write_bytes(4091, b"abcdef"));
        assert_eq!(m.u8(4095).unwrap().load(Relaxed), b'f');
        assert!(SharedMem::create(c"mantle-test", 0).is_err());
    }

    #[test]
    fn a_sealed_size_cannot_be_changed_through_any_fd() {
        let m = SharedMem::create(c"mantle-test", 8192).unwrap();
        m.seal_size().unwrap();
        // another process would open it through /proc: a new file
        // description, the same seals
        let path = format!("/proc/self/fd/{}", m.fd().as_raw_fd());
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        for len in [0, 4096, 8191, 8193, 1 << 20] {
            let e = f.set_len(len).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "set_len({len})");
        }
        // the seals themselves are sealed
        // SAFETY: fcntl on a valid fd with integer arguments.
        let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE) };
        assert_eq!(r, -1);
        m.u64(8184).unwrap().store(1, Relaxed);
        assert_eq!(m.len(), 8192);
    }

    #[test]
    fn copies_in_and_out_at_any_alignment_and_stay_inside() {
        let m = SharedMem::create(c"mantle-test", 4096).unwrap();
        let src: Vec<u8> = (0..100u8).collect();
        for off in [0, 1, 7, 8, 4096 - 100] {
            assert!(m.copy_in(off, &src));
            let mut out = vec![0u8; 100];
            assert!(m.copy_out(off, &mut out));
            assert_eq!(out, src, "at {off}");
        }
        let mut out = vec![0u8; 100];
        assert!(!m.copy_in(4097 - 100, &src));
        assert!(!m.copy_out(usize::MAX - 10, &mut out));
    }

    #[test]
    fn a_page_sealed_read_only_for_others_cannot_be_written_through_the_fd() {
        let m = SharedMem::create(c"mantle-test", 4096).unwrap();
        m.seal_read_only_for_others().unwrap();
        m.u32(0).unwrap().store(5, Relaxed); // the owner's mapping stays writable
        let path = format!("/proc/self/fd/{}", m.fd().as_raw_fd());
        // a reopened fd: writes refused
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        use std::io::Write;
        assert_eq!(
            (&f).write(b"x").unwrap_err().raw_os_error(),
            Some(libc::EPERM)
        );
        let fd = OwnedFd::from(f);
        // a writable shared mapping: refused
        // SAFETY: a new mapping of our own fd, unmapped below if made.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_eq!(p, libc::MAP_FAILED);
        // read-only: fine, and cannot be made writable
        let r = SharedMem::map_readonly(fd, 4096).unwrap();
        assert_eq!(r.u32(0).unwrap().load(Relaxed), 5);
        // SAFETY: mprotect of our own read-only mapping; expected to fail.
        let rc =
            unsafe { libc::mprotect(r.base().cast(), 4096, libc::PROT_READ | libc::PROT_WRITE) };
        assert_eq!(rc, -1);
    }

    #[test]
    fn futex_wait_times_out_and_returns_on_a_changed_word() {
        let w = AtomicU32::new(1);
        assert!(futex_wait(&w, 1, std::time::Duration::from_millis(5)));
        assert!(!futex_wait(&w, 2, std::time::Duration::from_millis(5)));
        futex_wake(&w); // nobody waits: harmless
    }
}
