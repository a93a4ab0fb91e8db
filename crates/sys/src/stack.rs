//! A thread's own stack: giving back the pages below the stack pointer
//! (madvise MADV_DONTNEED), so a component context that the TMEM policy
//! took out of its cache really returns its stack memory to the kernel
//! (issue 30). The thread keeps its mapping: the next call that reaches
//! that depth faults in fresh zero pages.
//!
//! Only the calling thread's own stack, only below its current frame: no
//! other code runs on that memory while the thread is in this function,
//! and nothing above the frame is touched.

use std::io;

/// The calling thread's stack, `[low, high)`.
pub fn own_stack() -> io::Result<(usize, usize)> {
    // SAFETY: a zeroed pthread_attr_t is filled by pthread_getattr_np
    // before any read; destroyed below.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    // SAFETY: pthread_self() is this live thread; attr is ours to fill.
    let r = unsafe { libc::pthread_getattr_np(libc::pthread_self(), &mut attr) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: attr was initialised above; addr and size are ours to fill.
    let r = unsafe { libc::pthread_attr_getstack(&attr, &mut addr, &mut size) };
    // SAFETY: attr was initialised by pthread_getattr_np.
    unsafe { libc::pthread_attr_destroy(&mut attr) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok((addr as usize, addr as usize + size))
}

/// Gives back to the kernel every whole page of the calling thread's
/// stack more than `margin` bytes below the current frame; returns the
/// bytes advised (0 when there is nothing below).
#[inline(never)]
pub fn release_unused(margin: usize) -> io::Result<usize> {
    let (low, high) = own_stack()?;
    let marker = 0u8;
    let sp = std::hint::black_box(&marker) as *const u8 as usize;
    if sp <= low || sp > high {
        return Err(io::Error::other(
            "the stack pointer is outside the thread's stack",
        ));
    }
    let page = 4096usize;
    let top = sp.saturating_sub(margin) & !(page - 1);
    let low = (low + page - 1) & !(page - 1);
    if top <= low {
        return Ok(0);
    }
    // SAFETY: [low, top) lies inside this thread's own stack, entirely
    // below the current frame (by `margin` bytes): no live data of any
    // frame is there, and no other thread uses this stack. MADV_DONTNEED
    // on private anonymous memory makes the next access fault in zeroes.
    let r = unsafe { libc::madvise(low as *mut libc::c_void, top - low, libc::MADV_DONTNEED) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(top - low)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/thread-self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap()
    }

    #[inline(never)]
    fn dirty(n: usize) -> u64 {
        let mut buf = [0u8; 1 << 20];
        for i in (0..n.min(buf.len())).step_by(4096) {
            buf[i] = 1;
        }
        std::hint::black_box(&mut buf)
            .iter()
            .step_by(4096)
            .map(|&b| b as u64)
            .sum()
    }

    #[test]
    fn the_pages_below_the_frame_leave_the_resident_set() {
        let t = std::thread::Builder::new()
            .stack_size(4 << 20)
            .spawn(|| {
                assert_eq!(dirty(1 << 20), 256);
                let before = rss_kib();
                let freed = release_unused(4096).unwrap();
                let after = rss_kib();
                // a second call from the same depth also works (and then
                // frees what its own frames dirtied since: nothing much)
                let again = release_unused(4096).unwrap();
                (before, after, freed, again)
            })
            .unwrap();
        let (before, after, freed, again) = t.join().unwrap();
        assert!(freed >= 1 << 20, "advised only {freed} bytes");
        assert!(again >= 1 << 20);
        assert!(
            before.saturating_sub(after) >= 900,
            "RSS {before} KiB -> {after} KiB after giving back the stack"
        );
    }
}
