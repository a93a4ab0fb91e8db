//! The profiler's system-call module: perf_event_open and its mmap rings,
//! loading and attaching the sample path (prof.bpf.c through libbpf-rs),
//! reading and draining its maps, and the few other raw calls recording
//! needs (signals, a gated child, the vDSO copy). Every `unsafe` block of
//! the crate is here.

use crate::abi::{Key, Stats};
use crate::Error;
use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use std::cell::RefCell;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

mod skel {
    include!(concat!(env!("OUT_DIR"), "/prof.skel.rs"));
}
use skel::{ProfSkel, ProfSkelBuilder};

fn kerr(what: impl Into<String>, e: impl std::fmt::Display) -> Error {
    Error::Kernel(format!("{}: {e}", what.into()))
}

/// `struct perf_event_attr` up to `sig_data` (PERF_ATTR_SIZE_VER7).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    /// sample_period, or sample_freq with [`attr::FREQ`].
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub reserved_3: u32,
    pub sig_data: u64,
}
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 128);

/// Bits of `perf_event_attr.flags` (linux/perf_event.h bitfield order).
pub mod attr {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const FREQ: u64 = 1 << 10;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    pub const TASK: u64 = 1 << 13;
    pub const WATERMARK: u64 = 1 << 14;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const BUILD_ID: u64 = 1 << 34;
}

pub const PERF_SAMPLE_IP: u64 = 1 << 0;
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub const PERF_COUNT_SW_DUMMY: u64 = 9;

pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_COMM: u32 = 3;
pub const PERF_RECORD_EXIT: u32 = 4;
pub const PERF_RECORD_THROTTLE: u32 = 5;
pub const PERF_RECORD_UNTHROTTLE: u32 = 6;
pub const PERF_RECORD_FORK: u32 = 7;
pub const PERF_RECORD_MMAP2: u32 = 10;
pub const PERF_RECORD_LOST_SAMPLES: u32 = 13;
pub const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
pub const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;

/// perf_event_open(2).
pub fn perf_event_open(a: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let mut a = *a;
    a.size = std::mem::size_of::<PerfEventAttr>() as u32;
    // SAFETY: a is a valid perf_event_attr of the size it declares.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &a as *const PerfEventAttr,
            pid,
            cpu,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn ioctl(fd: BorrowedFd, req: libc::c_ulong, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: perf ioctls with an integer argument.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn perf_enable(fd: BorrowedFd) -> io::Result<()> {
    ioctl(fd, IOC_ENABLE, 0)
}
pub fn perf_disable(fd: BorrowedFd) -> io::Result<()> {
    ioctl(fd, IOC_DISABLE, 0)
}
/// Sends `fd`'s ring output (throttle records) to `target`'s ring.
pub fn perf_set_output(fd: BorrowedFd, target: BorrowedFd) -> io::Result<()> {
    ioctl(fd, IOC_SET_OUTPUT, target.as_raw_fd() as libc::c_ulong)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// A perf mmap ring (side band): one metadata page and 2^n data pages.
pub struct PerfRing {
    base: *mut u8,
    len: usize,
    data_off: usize,
    data_size: usize,
    pub fd: OwnedFd,
}

/// One record of a perf ring: header type and misc, and the body.
pub struct PerfRecord {
    pub type_: u32,
    pub misc: u16,
    pub body: Vec<u8>,
}

impl PerfRing {
    pub fn new(fd: OwnedFd, data_pages: usize) -> io::Result<PerfRing> {
        let ps = page_size();
        let len = ps * (1 + data_pages);
        // SAFETY: mapping a perf event fd as documented in perf_event_open(2).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = p.cast::<u8>();
        // SAFETY: the first page is struct perf_event_mmap_page; data_offset
        // (1040) and data_size (1048) are u64 fields set by the kernel.
        let (data_off, data_size) = unsafe {
            (
                std::ptr::read_volatile(base.add(1040).cast::<u64>()) as usize,
                std::ptr::read_volatile(base.add(1048).cast::<u64>()) as usize,
            )
        };
        let (data_off, data_size) = if data_size == 0 {
            (ps, ps * data_pages)
        } else {
            (data_off, data_size)
        };
        Ok(PerfRing {
            base,
            len,
            data_off,
            data_size,
            fd,
        })
    }

    /// Takes every complete record out of the ring.
    pub fn read(&mut self, out: &mut Vec<PerfRecord>) {
        // SAFETY: data_head (1024) and data_tail (1032) are u64 fields of
        // the metadata page; head is read with acquire ordering and tail
        // written with release ordering as perf_event_open(2) requires.
        unsafe {
            let head_p = self.base.add(1024).cast::<u64>();
            let tail_p = self.base.add(1032).cast::<u64>();
            let head = std::ptr::read_volatile(head_p);
            std::sync::atomic::fence(Ordering::Acquire);
            let mut tail = std::ptr::read_volatile(tail_p);
            let data = self.base.add(self.data_off);
            let size = self.data_size as u64;
            let copy = |from: u64, n: usize| -> Vec<u8> {
                let mut v = vec![0u8; n];
                let start = (from % size) as usize;
                let first = n.min(self.data_size - start);
                std::ptr::copy_nonoverlapping(data.add(start), v.as_mut_ptr(), first);
                if first < n {
                    std::ptr::copy_nonoverlapping(data, v.as_mut_ptr().add(first), n - first);
                }
                v
            };
            while tail + 8 <= head {
                let h = copy(tail, 8);
                let type_ = u32::from_ne_bytes(h[0..4].try_into().unwrap());
                let misc = u16::from_ne_bytes(h[4..6].try_into().unwrap());
                let rsize = u16::from_ne_bytes(h[6..8].try_into().unwrap()) as u64;
                if rsize < 8 || tail + rsize > head {
                    break;
                }
                let body = copy(tail + 8, (rsize - 8) as usize);
                out.push(PerfRecord { type_, misc, body });
                tail += rsize;
            }
            std::sync::atomic::fence(Ordering::Release);
            std::ptr::write_volatile(tail_p, tail);
        }
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in new().
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

/// The loaded sample path.
pub struct Sampler {
    skel: ProfSkel<'static>,
    sel: *mut u32,
    counts: [MapHandle; 2],
    stats: MapHandle,
    ring: Option<(libbpf_rs::RingBuffer<'static>, Rc<RefCell<Vec<Key>>>)>,
    links: Vec<libbpf_rs::Link>,
    pub use_ring: bool,
}

/// Where the tags subsystem pins its view map.
pub const TAGS_VIEW_PIN: &str = "/sys/fs/bpf/mantle/tags/maps/view";

/// Opens the tags view map when the tags kernel side is loaded.
pub fn open_tags_view() -> Option<OwnedFd> {
    if !std::path::Path::new(TAGS_VIEW_PIN).exists() {
        return None;
    }
    let c = std::ffi::CString::new(TAGS_VIEW_PIN).ok()?;
    let opts = libbpf_sys::bpf_obj_get_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_obj_get_opts>() as _,
        file_flags: libbpf_sys::BPF_F_RDONLY,
        ..Default::default()
    };
    // SAFETY: valid path and opts.
    let fd = unsafe { libbpf_sys::bpf_obj_get_opts(c.as_ptr(), &opts) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new fd we own.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// (value_size, max_entries) of a BPF map.
pub fn map_geometry(fd: BorrowedFd) -> Option<(u32, u32)> {
    let mut info = libbpf_sys::bpf_map_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
    // SAFETY: info/len valid for writing.
    let rc = unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    (rc == 0).then_some((info.value_size, info.max_entries))
}

impl Sampler {
    /// Opens, configures and loads prof.bpf.o. `view`: the tags view map
    /// to read tag vectors from (None: a private empty one).
    pub fn load(use_ring: bool, timing: bool, view: Option<BorrowedFd>) -> Result<Sampler, Error> {
        // The object storage must outlive the skeleton, which lives as long
        // as the recording; one small leak per recording process.
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = ProfSkelBuilder::default()
            .open(storage)
            .map_err(|e| kerr("open the profiler's eBPF object", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.use_ring = use_ring as u32;
            ro.timing = timing as u32;
        }
        if let Some(v) = view {
            open.maps
                .view
                .reuse_fd(v)
                .map_err(|e| kerr("reuse the tags view map", e))?;
        }
        if !use_ring {
            let _ = open.maps.ring.set_max_entries(page_size() as u32);
        }
        let mut skel = open.load().map_err(|e| {
            kerr(
                "load the sample path (verifier or kernel refused prof.bpf.o)",
                e,
            )
        })?;
        let sel = skel
            .maps
            .bss_data
            .as_deref_mut()
            .map(|b| &mut b.sel as *mut u32)
            .ok_or_else(|| Error::Kernel("the .bss of prof.bpf.o is not mmapped".into()))?;
        let h = |m: &libbpf_rs::MapMut, n: &str| {
            MapHandle::try_from(m).map_err(|e| kerr(format!("map {n}"), e))
        };
        let counts = [
            h(&skel.maps.counts0, "counts0")?,
            h(&skel.maps.counts1, "counts1")?,
        ];
        let stats = h(&skel.maps.stats, "stats")?;
        let ring = if use_ring {
            let handle: &'static MapHandle = Box::leak(Box::new(h(&skel.maps.ring, "ring")?));
            let buf: Rc<RefCell<Vec<Key>>> = Rc::new(RefCell::new(Vec::new()));
            let b2 = buf.clone();
            let mut rb = libbpf_rs::RingBufferBuilder::new();
            rb.add(handle, move |data: &[u8]| {
                // a record of another layout is dropped, never trusted;
                // the kernel writes whole mp_keys, so this does not happen
                // unless the object and this build disagree
                if let Ok(k) = mantle_abi::read::<Key>(data, "mp_key") {
                    b2.borrow_mut().push(k);
                }
                0
            })
            .map_err(|e| kerr("ring buffer", e))?;
            Some((rb.build().map_err(|e| kerr("ring buffer", e))?, buf))
        } else {
            None
        };
        Ok(Sampler {
            skel,
            sel,
            counts,
            stats,
            ring,
            links: Vec::new(),
            use_ring,
        })
    }

    /// Attaches the sample path to one perf event.
    pub fn attach(&mut self, pfd: BorrowedFd) -> Result<(), Error> {
        // libbpf's perf link closes the fd it is given when it goes away:
        // hand it a duplicate it owns.
        use std::os::fd::IntoRawFd;
        let dup = pfd
            .try_clone_to_owned()
            .map_err(|e| kerr("dup perf event fd", e))?
            .into_raw_fd();
        let l = self
            .skel
            .progs
            .mp_sample
            .attach_perf_event(dup)
            .map_err(|e| kerr("attach the sample path to a perf event", e))?;
        self.links.push(l);
        Ok(())
    }

    /// Detaches from every perf event.
    pub fn detach(&mut self) {
        self.links.clear();
    }

    /// Sums the per-CPU counters.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        if let Ok(Some(v)) = self.stats.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY) {
            for c in v {
                if let Ok(v) = mantle_abi::read::<Stats>(&c, "mp_stats") {
                    s.merge(&v);
                }
            }
        }
        s
    }

    /// Aggregation mode: makes the other count map take new samples and
    /// returns (and empties) the one that was taking them.
    pub fn drain(&mut self, out: &mut Vec<(Key, u64)>) -> Result<(), Error> {
        if let Some((rb, buf)) = &self.ring {
            rb.consume().map_err(|e| kerr("consume ring buffer", e))?;
            out.extend(buf.borrow_mut().drain(..).map(|k| (k, 1)));
            return Ok(());
        }
        // SAFETY: sel points into the mmapped .bss, alive as long as skel.
        let old = unsafe { std::ptr::read_volatile(self.sel) } & 1;
        // SAFETY: as above; the program reads sel with a plain load.
        unsafe { std::ptr::write_volatile(self.sel, old ^ 1) };
        // a program that read the old value may still be running on another
        // CPU: it finishes within microseconds
        std::thread::sleep(std::time::Duration::from_micros(200));
        let map = &self.counts[old as usize];
        let keys: Vec<Vec<u8>> = map.keys().collect();
        for k in keys {
            if let (Ok(Some(v)), Ok(key)) = (
                map.lookup(&k, MapFlags::ANY),
                mantle_abi::read::<Key>(&k, "mp_key"),
            ) {
                let n = mantle_abi::read::<u64>(&v, "count").unwrap_or(0);
                out.push((key, n));
            }
            let _ = map.delete(&k);
        }
        Ok(())
    }

    /// run_time_ns and run_cnt of the program (kernel.bpf_stats / BPF_ENABLE_STATS).
    pub fn prog_run_stats(&self) -> (u64, u64) {
        let fd = self.skel.progs.mp_sample.as_fd().as_raw_fd();
        let mut info = libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: info/len valid for writing.
        let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
        if rc < 0 {
            return (0, 0);
        }
        (info.run_time_ns, info.run_cnt)
    }
}

/// Turns on the kernel's per-program run-time statistics while the fd lives.
pub fn enable_bpf_stats() -> Option<OwnedFd> {
    // SAFETY: no pointers.
    let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
    if fd < 0 {
        None
    } else {
        // SAFETY: a new fd we own.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM/SIGHUP set a flag instead of killing the recorder.
pub fn catch_stop_signals() {
    STOP.store(false, Ordering::SeqCst);
    for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            libc::signal(s, on_signal as *const () as libc::sighandler_t);
        }
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

pub fn stderr_is_tty() -> bool {
    // SAFETY: no pointers.
    unsafe { libc::isatty(2) == 1 }
}

/// A child process stopped before exec until [`Gate::release`].
pub struct Gate {
    w: OwnedFd,
}

impl Gate {
    pub fn release(self) -> io::Result<()> {
        let b = [1u8];
        // SAFETY: writing one byte from a valid buffer.
        let n = unsafe { libc::write(self.w.as_raw_fd(), b.as_ptr().cast(), 1) };
        if n == 1 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// A child forked by [`spawn_gated`].
pub struct Child {
    pub pid: u32,
    done: Option<i32>,
}

fn decode_status(st: libc::c_int) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else if libc::WIFSIGNALED(st) {
        128 + libc::WTERMSIG(st)
    } else {
        -1
    }
}

impl Child {
    /// Exit code (128 + signal when killed), if it has exited.
    pub fn try_wait(&mut self) -> Option<i32> {
        if self.done.is_none() {
            let mut st = 0;
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut st, libc::WNOHANG) };
            if r == self.pid as i32 {
                self.done = Some(decode_status(st));
            }
        }
        self.done
    }
    pub fn wait(&mut self) -> Option<i32> {
        while self.done.is_none() {
            let mut st = 0;
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut st, 0) };
            if r == self.pid as i32 {
                self.done = Some(decode_status(st));
            } else if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        self.done
    }
}

/// Forks a child that waits for the gate, then execs `argv` (PATH
/// searched). std's spawn cannot be used: it waits for the exec.
pub fn spawn_gated(argv: &[String]) -> io::Result<(Child, Gate)> {
    use std::ffi::CString;
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| io::Error::other("NUL in argument")))
        .collect::<io::Result<_>>()?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // does the program exist? (after fork we can only exit)
    if !argv[0].contains('/') {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(&argv[0]).is_file()))
            .unwrap_or(false);
        if !found {
            return Err(io::Error::new(io::ErrorKind::NotFound, "not found in PATH"));
        }
    } else if !std::path::Path::new(&argv[0]).exists() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
    }
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fork; the child only calls async-signal-safe functions
    // (read, execvp, _exit) on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            libc::close(fds[1]);
            let mut b = [0u8];
            if libc::read(fds[0], b.as_mut_ptr().cast(), 1) != 1 {
                libc::_exit(127);
            }
            libc::execvp(ptrs[0], ptrs.as_ptr());
            libc::_exit(127);
        }
    }
    // SAFETY: fds we own.
    unsafe {
        libc::close(fds[0]);
    }
    // SAFETY: fds[1] is ours.
    let w = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    Ok((
        Child {
            pid: pid as u32,
            done: None,
        },
        Gate { w },
    ))
}

/// A copy of this process's vDSO image (the same for every process of
/// this kernel and ABI), for symbolizing [vdso] samples later.
pub fn vdso_image() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (s, e) = line.split_whitespace().next()?.split_once('-')?;
    let s = usize::from_str_radix(s, 16).ok()?;
    let e = usize::from_str_radix(e, 16).ok()?;
    // SAFETY: [s, e) is this process's readable vDSO mapping.
    Some(unsafe { std::slice::from_raw_parts(s as *const u8, e - s) }.to_vec())
}

/// An anonymous in-memory file holding `data` (memfd_create), for handing
/// bytes that were already validated to a library that reads files by
/// path (through [`crate::files::fd_path`]): no file on disk can change
/// under it.
pub fn memfd(name: &str, data: &[u8]) -> io::Result<std::fs::File> {
    use std::io::{Seek, Write};
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::other("NUL in memfd name"))?;
    // SAFETY: c is a valid NUL-terminated string; the flags are plain bits.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.write_all(data)?;
    f.rewind()?;
    Ok(f)
}
