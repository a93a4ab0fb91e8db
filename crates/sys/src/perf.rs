//! perf events: `perf_event_open(2)`, the perf ioctls and the mmap'd perf
//! ring (the "side band" of PERF_RECORD_* records).
//!
//! Kernel interfaces: `perf_event_open` (Linux 2.6.31), the
//! `PERF_EVENT_IOC_ENABLE/DISABLE/SET_OUTPUT` ioctls (2.6.31/2.6.31/2.6.35),
//! and the mmap layout of `struct perf_event_mmap_page` followed by 2^n
//! data pages (see perf_event_open(2), "MMAP layout").
//!
//! Invariants:
//! * There is one [`PerfEventAttr`] in mantle, of PERF_ATTR_SIZE_VER8 (136
//!   bytes, up to `config3`, Linux 6.3: kernel commit 09519ec3b19e "perf:
//!   Add perf_event_attr::config3"). [`perf_event_open`] always sets `size`
//!   itself. Older kernels accept the larger struct as long as the bytes
//!   they do not know are zero (`perf_copy_attr` checks them with
//!   `check_zeroed_user` and fails with E2BIG otherwise), and `Default`
//!   leaves them zero.
//! * Every fd is opened with PERF_FLAG_FD_CLOEXEC and returned as an
//!   [`OwnedFd`]; errors are the `io::Error` of the errno.
//! * The ring is read by one reader: [`PerfRing::read`] takes `&mut self`.
//!   What the kernel wrote is never trusted: a record header whose size is
//!   below 8 bytes, larger than the data area or running past `data_head`,
//!   and a `data_head` behind `data_tail` or more than the data area ahead
//!   of it, drop the unread bytes and count one corruption
//!   ([`PerfRing::corrupt`]), never a panic and never an endless loop.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

/// `struct perf_event_attr` (linux/perf_event.h) up to and including
/// `config3`: PERF_ATTR_SIZE_VER8, 136 bytes. The bitfield word after
/// `read_format` is [`PerfEventAttr::flags`], with the bits in [`attr`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerfEventAttr {
    /// PERF_TYPE_*, or a dynamic PMU type from
    /// /sys/bus/event_source/devices/*/type.
    pub type_: u32,
    /// Set by [`perf_event_open`] to `size_of::<PerfEventAttr>()`.
    pub size: u32,
    pub config: u64,
    /// sample_period, or sample_freq with [`attr::FREQ`].
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    /// The bitfield word: disabled, inherit, ... ([`attr`]).
    pub flags: u64,
    /// wakeup_events, or wakeup_watermark with [`attr::WATERMARK`].
    pub wakeup_events: u32,
    pub bp_type: u32,
    /// config1 (or bp_addr, kprobe_func, uprobe_path).
    pub config1: u64,
    /// config2 (or bp_len, kprobe_addr, probe_offset).
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
    /// aux_action (Linux 6.13: aux_start_paused, aux_pause, aux_resume);
    /// reserved and zero before.
    pub aux_action: u32,
    pub sig_data: u64,
    pub config3: u64,
}

/// PERF_ATTR_SIZE_VER8 in linux/perf_event.h.
pub const PERF_ATTR_SIZE_VER8: u32 = 136;
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<PerfEventAttr>() == PERF_ATTR_SIZE_VER8 as usize);
    // The PERF_ATTR_SIZE_VER* steps of linux/perf_event.h are where these
    // fields end.
    assert!(offset_of!(PerfEventAttr, flags) == 40);
    assert!(offset_of!(PerfEventAttr, config1) == 56);
    assert!(offset_of!(PerfEventAttr, config2) == 64); // VER0 = 64
    assert!(offset_of!(PerfEventAttr, branch_sample_type) == 72); // VER1 = 72
    assert!(offset_of!(PerfEventAttr, sample_regs_user) == 80); // VER2 = 80
    assert!(offset_of!(PerfEventAttr, sample_regs_intr) == 96); // VER3 = 96
    assert!(offset_of!(PerfEventAttr, aux_watermark) == 104); // VER4 = 104
    assert!(offset_of!(PerfEventAttr, aux_sample_size) == 112); // VER5 = 112
    assert!(offset_of!(PerfEventAttr, sig_data) == 120); // VER6 = 120
    assert!(offset_of!(PerfEventAttr, config3) == 128); // VER7 = 128
};

/// Bits of [`PerfEventAttr::flags`], in linux/perf_event.h bitfield order.
pub mod attr {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const FREQ: u64 = 1 << 10;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    pub const TASK: u64 = 1 << 13;
    pub const WATERMARK: u64 = 1 << 14;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    /// exclude_callchain_kernel: no kernel part in the callchain (asked
    /// with `exclude_kernel` by an unprivileged recorder, as perf's `:u`).
    pub const EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
    /// exclude_callchain_user: the callchain stops at the kernel part
    /// (the user stack is taken another way, e.g. PERF_SAMPLE_STACK_USER).
    pub const EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const BUILD_ID: u64 = 1 << 34;
}

pub const PERF_TYPE_HARDWARE: u32 = 0;
pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_TYPE_HW_CACHE: u32 = 3;
pub const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
pub const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
pub const PERF_COUNT_SW_DUMMY: u64 = 9;

pub const PERF_SAMPLE_IP: u64 = 1 << 0;
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub const PERF_SAMPLE_CPU: u64 = 1 << 7;
pub const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
/// The user registers named by `sample_regs_user` (Linux 3.7).
pub const PERF_SAMPLE_REGS_USER: u64 = 1 << 12;
/// A copy of `sample_stack_user` bytes of the user stack from its stack
/// pointer up (Linux 3.7): what `perf record --call-graph dwarf` unwinds.
pub const PERF_SAMPLE_STACK_USER: u64 = 1 << 13;
/// The cgroup id of the sampled task in the perf_event controller's
/// hierarchy (Linux 5.7, CONFIG_CGROUP_PERF): the last field of a
/// sample record among those mantle asks for.
pub const PERF_SAMPLE_CGROUP: u64 = 1 << 21;

/// x86-64 register numbers of `sample_regs_user`
/// (arch/x86/include/uapi/asm/perf_regs.h): the three an unwinder needs.
pub const PERF_REG_X86_BP: u32 = 6;
pub const PERF_REG_X86_SP: u32 = 7;
pub const PERF_REG_X86_IP: u32 = 8;
/// `abi` word of a PERF_SAMPLE_REGS_USER block: no user registers (a
/// kernel thread's sample).
pub const PERF_SAMPLE_REGS_ABI_NONE: u64 = 0;

pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_COMM: u32 = 3;
pub const PERF_RECORD_EXIT: u32 = 4;
pub const PERF_RECORD_THROTTLE: u32 = 5;
pub const PERF_RECORD_UNTHROTTLE: u32 = 6;
pub const PERF_RECORD_FORK: u32 = 7;
pub const PERF_RECORD_SAMPLE: u32 = 9;
pub const PERF_RECORD_MMAP2: u32 = 10;
pub const PERF_RECORD_LOST_SAMPLES: u32 = 13;
/// The cpumode bits of a record's misc, and their kernel value.
pub const PERF_RECORD_MISC_CPUMODE_MASK: u16 = 7;
pub const PERF_RECORD_MISC_KERNEL: u16 = 1;
pub const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
pub const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// PERF_EVENT_IOC_ENABLE, _DISABLE and _SET_OUTPUT: _IO('$', 0), _IO('$', 1)
/// and _IO('$', 5) in linux/perf_event.h (no size bits: integer argument).
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;

/// perf_event_open(2) with `group_fd = -1` and PERF_FLAG_FD_CLOEXEC.
/// `attr.size` is overwritten with the size of [`PerfEventAttr`].
pub fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let mut a = *attr;
    a.size = PERF_ATTR_SIZE_VER8;
    // SAFETY: `a` is a fully initialised perf_event_attr of the size it
    // declares and outlives the call; a pointer the caller put in config1
    // (a kprobe symbol name) is the caller's to keep alive, and the kernel
    // only reads it during the call.
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
    // SAFETY: perf_event_open returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// PERF_FLAG_PID_CGROUP: `pid` is an fd of a cgroup directory.
const PERF_FLAG_PID_CGROUP: libc::c_ulong = 4;

/// perf_event_open(2) in cgroup mode: the event counts (or samples) only
/// while a task of the cgroup at `dir` (an open cgroup v2 directory), or
/// of its descendants, runs on `cpu` (PERF_FLAG_PID_CGROUP; `cpu` must be
/// a CPU, not -1). Needs what CPU-wide events need: CAP_PERFMON (or
/// CAP_SYS_ADMIN), or `perf_event_paranoid` 0 or less.
pub fn perf_event_open_cgroup(
    attr: &PerfEventAttr,
    dir: BorrowedFd,
    cpu: i32,
) -> io::Result<OwnedFd> {
    let mut a = *attr;
    a.size = PERF_ATTR_SIZE_VER8;
    // SAFETY: `a` is a fully initialised perf_event_attr of the size it
    // declares and outlives the call; `dir` is a live descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &a as *const PerfEventAttr,
            dir.as_raw_fd(),
            cpu,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC | PERF_FLAG_PID_CGROUP,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A cgroup's CPU time on one CPU, to the nanosecond: a counting
/// `cpu-clock` software event in cgroup mode (perf_event_open(2),
/// PERF_FLAG_PID_CGROUP, Linux 2.6.39; on cgroup v2 the perf_event
/// controller is implicit), which runs while a task of the cgroup or of
/// its descendants is on that CPU.
///
/// Why this and not the CPU clocks of the cgroup's processes: a process
/// CPU clock (`clock_getcpuclockid`) read from another process leaves out
/// what its running threads ran since the last scheduler tick
/// (`thread_group_cputime` brings only the caller's own thread up to date:
/// measured on this kernel, a spinner's clock advanced in 4 ms steps, HZ
/// 250), thread CPU clocks of another process cannot be read at all, and
/// cgroup `cpu.stat` lags the same tick. Reading the event brings a
/// running counter up to date (an IPI to its CPU when it is active
/// elsewhere: 3-4 µs measured; local otherwise).
pub struct CgroupCpuClock {
    fd: OwnedFd,
}

impl CgroupCpuClock {
    /// Counts the time tasks of the cgroup at `dir` (an open directory)
    /// run on `cpu`. Needs CAP_PERFMON (or CAP_SYS_ADMIN) or a
    /// `perf_event_paranoid` that allows CPU-wide events.
    pub fn open(dir: BorrowedFd, cpu: usize) -> io::Result<CgroupCpuClock> {
        let a = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            size: PERF_ATTR_SIZE_VER8,
            config: PERF_COUNT_SW_CPU_CLOCK,
            ..Default::default()
        };
        // SAFETY: `a` is a fully initialised perf_event_attr of the size it
        // declares and outlives the call; `dir` is a live descriptor.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &a as *const PerfEventAttr,
                dir.as_raw_fd(),
                cpu as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC | PERF_FLAG_PID_CGROUP,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: perf_event_open returned a new descriptor nobody owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(CgroupCpuClock { fd })
    }

    /// ns counted so far.
    pub fn read_ns(&self) -> io::Result<u64> {
        let mut v = [0u8; 8];
        // SAFETY: v is 8 writable bytes; a counting event without a
        // read_format reads as one u64.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
        if n != 8 {
            return Err(if n < 0 {
                io::Error::last_os_error()
            } else {
                io::Error::from(io::ErrorKind::UnexpectedEof)
            });
        }
        Ok(u64::from_ne_bytes(v))
    }
}

fn ioctl(fd: BorrowedFd, req: libc::c_ulong, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the perf ioctls used here take an integer argument (no
    // pointer), and fd is a live descriptor for the duration of the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// PERF_EVENT_IOC_ENABLE.
pub fn perf_enable(fd: BorrowedFd) -> io::Result<()> {
    ioctl(fd, IOC_ENABLE, 0)
}

/// PERF_EVENT_IOC_DISABLE.
pub fn perf_disable(fd: BorrowedFd) -> io::Result<()> {
    ioctl(fd, IOC_DISABLE, 0)
}

/// PERF_EVENT_IOC_SET_OUTPUT: sends `fd`'s ring output to `target`'s ring
/// (both events must be on the same CPU, or both per-task).
pub fn perf_set_output(fd: BorrowedFd, target: BorrowedFd) -> io::Result<()> {
    ioctl(fd, IOC_SET_OUTPUT, target.as_raw_fd() as libc::c_ulong)
}

use crate::os::page_size;

/// Byte offsets in `struct perf_event_mmap_page` (linux/perf_event.h): the
/// first 1024 bytes are the self-monitoring part, then come these u64s.
const MMAP_DATA_HEAD: usize = 1024;
const MMAP_DATA_TAIL: usize = 1032;
const MMAP_DATA_OFFSET: usize = 1040;
const MMAP_DATA_SIZE: usize = 1048;

/// A perf mmap ring: one metadata page and 2^n data pages, mapped
/// read-write so that the kernel does not overwrite unread records
/// (perf_event_open(2): with PROT_WRITE the reader owns data_tail).
pub struct PerfRing {
    base: *mut u8,
    len: usize,
    data_off: usize,
    data_size: usize,
    corrupt: u64,
    pub fd: OwnedFd,
}

/// One record of a perf ring: the header's type and misc, and the body
/// (the bytes after the 8-byte header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfRecord {
    pub type_: u32,
    pub misc: u16,
    pub body: Vec<u8>,
}

impl PerfRing {
    /// Maps the ring of perf event `fd` with `data_pages` data pages (a
    /// power of two, as the kernel requires).
    pub fn new(fd: OwnedFd, data_pages: usize) -> io::Result<PerfRing> {
        let ps = page_size();
        let len = data_pages
            .checked_add(1)
            .and_then(|n| n.checked_mul(ps))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a new shared mapping of a perf event fd, as perf_event_open(2)
        // documents; the kernel validates len and returns MAP_FAILED if not.
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
        // SAFETY: the mapping is at least one page (>= 4096 bytes), so the
        // u64 fields at 1040 and 1048 are inside it and 8-aligned (the
        // mapping is page-aligned); volatile because the kernel owns them.
        let (off, size) = unsafe {
            (
                std::ptr::read_volatile(base.add(MMAP_DATA_OFFSET).cast::<u64>()) as usize,
                std::ptr::read_volatile(base.add(MMAP_DATA_SIZE).cast::<u64>()) as usize,
            )
        };
        // data_offset/data_size exist since Linux 4.1; before, they read 0
        // and the data starts at the second page. A value that does not fit
        // the mapping is not trusted either.
        let (data_off, data_size) = if size == 0 || off.checked_add(size).is_none_or(|e| e > len) {
            (ps, ps * data_pages)
        } else {
            (off, size)
        };
        Ok(PerfRing {
            base,
            len,
            data_off,
            data_size,
            corrupt: 0,
            fd,
        })
    }

    /// How many times the ring's contents were found corrupted (and the
    /// unread bytes dropped) so far.
    pub fn corrupt(&self) -> u64 {
        self.corrupt
    }

    /// Takes every complete record out of the ring into `out`.
    pub fn read(&mut self, out: &mut Vec<PerfRecord>) {
        // SAFETY: data_head and data_tail are 8-aligned u64 fields of the
        // metadata page, inside the mapping made in new() and alive until
        // drop. Head is read before the acquire fence and tail written after
        // the release fence, the order perf_event_open(2) prescribes, so the
        // data between them is complete when read and not overwritten until
        // tail moves.
        let (head, tail) = unsafe {
            let head = std::ptr::read_volatile(self.base.add(MMAP_DATA_HEAD).cast::<u64>());
            fence(Ordering::Acquire);
            let tail = std::ptr::read_volatile(self.base.add(MMAP_DATA_TAIL).cast::<u64>());
            (head, tail)
        };
        let data = self.base.wrapping_add(self.data_off);
        let size = self.data_size;
        let copy = |from: u64, dst: &mut [u8]| {
            let start = (from % size as u64) as usize;
            let first = dst.len().min(size - start);
            // SAFETY: start < size and first <= size - start, so both copies
            // stay inside the data area [data_off, data_off + size) of the
            // mapping (checked against len in new()); dst.len() <= size is
            // guaranteed by drain_records. The bytes between tail and head
            // are not written by the kernel until tail moves past them.
            unsafe {
                std::ptr::copy_nonoverlapping(data.add(start), dst.as_mut_ptr(), first);
                std::ptr::copy_nonoverlapping(data, dst.as_mut_ptr().add(first), dst.len() - first);
            }
        };
        let (tail, corrupt) = drain_records(size as u64, tail, head, copy, out);
        self.corrupt += corrupt as u64;
        fence(Ordering::Release);
        // SAFETY: as for the reads above; the reader owns data_tail.
        unsafe { std::ptr::write_volatile(self.base.add(MMAP_DATA_TAIL).cast::<u64>(), tail) };
    }
}

/// The ring walk, apart from the memory it reads: appends the records
/// between `tail` and `head` of a ring of `size` data bytes to `out`,
/// reading bytes with `copy(position, buffer)`. Returns the new tail and
/// whether the contents were corrupt (the rest then dropped: tail = head).
fn drain_records(
    size: u64,
    mut tail: u64,
    head: u64,
    copy: impl Fn(u64, &mut [u8]),
    out: &mut Vec<PerfRecord>,
) -> (u64, bool) {
    if head < tail || head - tail > size {
        return (head, true);
    }
    while head - tail >= 8 {
        let mut h = [0u8; 8];
        copy(tail, &mut h);
        let type_ = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_ne_bytes([h[4], h[5]]);
        let rsize = u64::from(u16::from_ne_bytes([h[6], h[7]]));
        // The kernel moves data_head only past whole records, so a record
        // that does not fit before head is corruption, not a partial write.
        if rsize < 8 || rsize > head - tail {
            return (head, true);
        }
        let mut body = vec![0u8; (rsize - 8) as usize];
        copy(tail + 8, &mut body);
        out.push(PerfRecord { type_, misc, body });
        tail += rsize;
    }
    // Fewer than 8 bytes left: a header cannot be split by head.
    (tail, head != tail)
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly the mapping made in new(), unmapped once.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(type_: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut v = type_.to_ne_bytes().to_vec();
        v.extend(misc.to_ne_bytes());
        v.extend(((body.len() + 8) as u16).to_ne_bytes());
        v.extend(body);
        v
    }

    /// A ring of `size` bytes holding `bytes` from position `at`.
    fn ring(size: usize, at: u64, bytes: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; size];
        for (i, b) in bytes.iter().enumerate() {
            r[(at as usize + i) % size] = *b;
        }
        r
    }

    fn walk(r: &[u8], tail: u64, head: u64) -> (u64, bool, Vec<PerfRecord>) {
        let mut out = Vec::new();
        let copy = |from: u64, dst: &mut [u8]| {
            for (i, d) in dst.iter_mut().enumerate() {
                *d = r[((from as usize) + i) % r.len()];
            }
        };
        let (t, c) = drain_records(r.len() as u64, tail, head, copy, &mut out);
        (t, c, out)
    }

    #[test]
    fn records_wrap_around() {
        let mut bytes = rec(PERF_RECORD_COMM, 1, &[1, 2, 3, 4, 5, 6, 7, 8]);
        bytes.extend(rec(PERF_RECORD_EXIT, 0, &[9; 16]));
        let at = 60;
        let r = ring(64, at, &bytes);
        let head = at + bytes.len() as u64;
        let (t, c, out) = walk(&r, at, head);
        assert_eq!((t, c), (head, false));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].type_, PERF_RECORD_COMM);
        assert_eq!(out[0].body, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(out[1].body, [9; 16]);
    }

    #[test]
    fn corrupt_sizes_are_counted_not_looped_on() {
        // size 0: would never advance
        let mut zero = rec(PERF_RECORD_COMM, 0, &[]);
        zero[6] = 0;
        zero[7] = 0;
        let (t, c, out) = walk(&ring(64, 0, &zero), 0, 16);
        assert_eq!((t, c, out.len()), (16, true, 0));
        // a size running past head
        let mut long = rec(PERF_RECORD_COMM, 0, &[0; 8]);
        long[6] = 200;
        let (t, c, out) = walk(&ring(64, 0, &long), 0, 16);
        assert_eq!((t, c, out.len()), (16, true, 0));
        // head behind tail, or further ahead than the ring holds
        assert!(walk(&ring(64, 0, &[]), 40, 8).1);
        assert!(walk(&ring(64, 0, &[]), 0, 65).1);
        // a record after a good one: the good one is kept
        let mut two = rec(PERF_RECORD_EXIT, 0, &[7; 8]);
        two.extend([0u8; 8]);
        let (t, c, out) = walk(&ring(64, 0, &two), 0, 32);
        assert_eq!((t, c, out.len()), (32, true, 1));
        // nothing to read is not corruption
        assert!(!walk(&ring(64, 0, &[]), 8, 8).1);
    }

    /// The struct as this kernel's BTF lays it out: same offsets for every
    /// field we name, and the kernel's struct no smaller than ours.
    #[test]
    fn attr_matches_kernel_btf() {
        let _g = crate::test_serial(); // opens the BTF file: fds are counted elsewhere
        use libbpf_rs::btf::types::{MemberAttr, Struct};
        use libbpf_rs::btf::{Btf, HasSize};
        let Ok(btf) = Btf::from_vmlinux() else {
            assert!(!std::path::Path::new("/sys/kernel/btf/vmlinux").exists());
            return;
        };
        let s: Struct = btf
            .type_by_name("perf_event_attr")
            .expect("perf_event_attr");
        assert!(s.size() >= PERF_ATTR_SIZE_VER8 as usize, "{}", s.size());
        let off = |name: &str| {
            s.iter()
                .find(|m| m.name.is_some_and(|n| n == name))
                .and_then(|m| match m.attr {
                    MemberAttr::Normal { offset } => Some(offset as usize / 8),
                    _ => None,
                })
        };
        use std::mem::offset_of;
        for (name, ours) in [
            ("config", offset_of!(PerfEventAttr, config)),
            ("sample_type", offset_of!(PerfEventAttr, sample_type)),
            ("read_format", offset_of!(PerfEventAttr, read_format)),
            ("bp_type", offset_of!(PerfEventAttr, bp_type)),
            (
                "branch_sample_type",
                offset_of!(PerfEventAttr, branch_sample_type),
            ),
            (
                "sample_regs_user",
                offset_of!(PerfEventAttr, sample_regs_user),
            ),
            (
                "sample_stack_user",
                offset_of!(PerfEventAttr, sample_stack_user),
            ),
            ("clockid", offset_of!(PerfEventAttr, clockid)),
            (
                "sample_regs_intr",
                offset_of!(PerfEventAttr, sample_regs_intr),
            ),
            ("aux_watermark", offset_of!(PerfEventAttr, aux_watermark)),
            (
                "sample_max_stack",
                offset_of!(PerfEventAttr, sample_max_stack),
            ),
            (
                "aux_sample_size",
                offset_of!(PerfEventAttr, aux_sample_size),
            ),
            ("sig_data", offset_of!(PerfEventAttr, sig_data)),
            ("config3", offset_of!(PerfEventAttr, config3)),
        ] {
            assert_eq!(off(name), Some(ours), "offset of perf_event_attr.{name}");
        }
        let page: Struct = btf.type_by_name("perf_event_mmap_page").expect("mmap page");
        let off = |name: &str| {
            page.iter()
                .find(|m| m.name.is_some_and(|n| n == name))
                .and_then(|m| match m.attr {
                    MemberAttr::Normal { offset } => Some(offset as usize / 8),
                    _ => None,
                })
        };
        assert_eq!(off("data_head"), Some(MMAP_DATA_HEAD));
        assert_eq!(off("data_tail"), Some(MMAP_DATA_TAIL));
        assert_eq!(off("data_offset"), Some(MMAP_DATA_OFFSET));
        assert_eq!(off("data_size"), Some(MMAP_DATA_SIZE));
    }

    /// A software event's ring: comm records of this thread arrive and
    /// parse (needs perf events for this process: perf_event_paranoid <= 2).
    #[test]
    fn ring_sees_a_comm_record() {
        let _g = crate::test_serial();
        let a = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            config: PERF_COUNT_SW_DUMMY,
            flags: attr::COMM | attr::EXCLUDE_KERNEL | attr::EXCLUDE_HV,
            ..Default::default()
        };
        // A software event on this thread: allowed to every user up to
        // perf_event_paranoid 2 (Debian's default); a refusal fails.
        let fd = perf_event_open(&a, 0, -1).unwrap_or_else(|e| {
            panic!("perf_event_open of a dummy event on this thread: {e} (kernel.perf_event_paranoid > 2?)")
        });
        let mut ring = PerfRing::new(fd, 1).expect("mmap");
        let name = c"mantle-perf-t";
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
        assert_eq!(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) }, 0);
        let mut out = Vec::new();
        ring.read(&mut out);
        assert_eq!(ring.corrupt(), 0);
        assert!(
            out.iter().any(|r| r.type_ == PERF_RECORD_COMM
                && r.body.windows(13).any(|w| w == b"mantle-perf-t")),
            "{out:?}"
        );
    }
}
