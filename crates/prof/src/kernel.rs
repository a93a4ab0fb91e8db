//! The profiler's own loading: opening, loading and attaching the sample
//! path (prof.bpf.c through libbpf-rs) to the perf events, and reading and
//! draining its maps. perf_event_open, the perf ioctls and the mmap'd
//! side-band ring (`mantle_sys::perf`), and the signals, gated child, vDSO
//! copy and memfd recording needs (`mantle_sys::os`) are re-exported here
//! at their old paths; the bpf(2) calls outside the skeleton (the pinned
//! tags view, map and program info, BPF_ENABLE_STATS) are
//! `mantle_sys::bpf`'s. The crate's one `unsafe` left is here: flipping
//! the sample path's map selector in its mmapped .bss.

use crate::abi::{Key, Stats};
use crate::Error;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::rc::Rc;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/prof.skel.rs"));
}
use skel::{ProfSkel, ProfSkelBuilder};

fn kerr(what: impl Into<String>, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::os(what, e)
}

// perf_event_attr, perf_event_open, the perf ioctls and the mmap'd ring
// are mantle-sys's (one definition for all of mantle); re-exported at
// their old paths so that the rest of the crate is unchanged.
pub use mantle_sys::perf::{
    attr, perf_disable, perf_enable, perf_event_open, perf_set_output, PerfEventAttr, PerfRecord,
    PerfRing, PERF_COUNT_SW_DUMMY, PERF_RECORD_COMM, PERF_RECORD_EXIT, PERF_RECORD_FORK,
    PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES, PERF_RECORD_MISC_COMM_EXEC,
    PERF_RECORD_MISC_CPUMODE_MASK, PERF_RECORD_MISC_KERNEL, PERF_RECORD_MISC_MMAP_BUILD_ID,
    PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE, PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE,
    PERF_REG_X86_BP, PERF_REG_X86_IP, PERF_REG_X86_SP, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU,
    PERF_SAMPLE_IP, PERF_SAMPLE_REGS_ABI_NONE, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

use mantle_sys::os::page_size;

/// The loaded sample path.
pub struct Sampler {
    skel: ProfSkel<'static>,
    sel: *mut u32,
    counts: [MapHandle; 2],
    /// The stack maps paired with `counts` (same `sel` flip).
    stack_maps: [MapHandle; 2],
    stats: MapHandle,
    cost_hist: MapHandle,
    ring: Option<(libbpf_rs::RingBuffer<'static>, Rc<RefCell<Vec<Key>>>)>,
    links: Vec<libbpf_rs::Link>,
    pub use_ring: bool,
}

/// Opens the tags view map (read-only) when the tags kernel side is
/// loaded.
pub fn open_tags_view() -> Option<OwnedFd> {
    mantle_sys::bpf::obj_get(&mantle_abi::paths::pin("maps", "view"), false).ok()
}

/// (value_size, max_entries) of a BPF map.
pub fn map_geometry(fd: BorrowedFd) -> Option<(u32, u32)> {
    mantle_sys::bpf::map_geometry(fd)
        .ok()
        .map(|(_, value, max)| (value, max))
}

impl Sampler {
    /// Opens, configures and loads prof.bpf.o. `view`: the tags view map
    /// to read tag vectors from (None: a private empty one).
    pub fn load(
        use_ring: bool,
        timing: bool,
        stacks: bool,
        view: Option<BorrowedFd>,
    ) -> Result<Sampler, Error> {
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
            ro.stacks = stacks as u32;
        }
        if !stacks {
            // unused (allocated on use anyway): the smallest table
            let _ = open.maps.stacks0.set_max_entries(1);
            let _ = open.maps.stacks1.set_max_entries(1);
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
        let cost_hist = h(&skel.maps.cost_hist, "cost_hist")?;
        let stack_maps = [
            h(&skel.maps.stacks0, "stacks0")?,
            h(&skel.maps.stacks1, "stacks1")?,
        ];
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
            stack_maps,
            stats,
            cost_hist,
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

    /// The self-timing histogram summed over CPUs (`MP_HIST_BUCKETS`
    /// counts of `MP_HIST_NS` ns steps).
    pub fn cost_hist(&self) -> Vec<u64> {
        let n = crate::abi::MP_HIST_BUCKETS;
        let mut v = vec![0u64; n as usize];
        for i in 0..n {
            if let Ok(Some(per_cpu)) = self
                .cost_hist
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
            {
                for c in per_cpu {
                    let x = mantle_abi::read::<u64>(&c, "count").unwrap_or(0);
                    v[i as usize] = v[i as usize].saturating_add(x);
                }
            }
        }
        v
    }

    /// Aggregation mode: makes the other count map take new samples and
    /// returns (and empties) the one that was taking them, with the
    /// frames of every stack id its keys name (`stacks`: id -> frames,
    /// leaf first), and empties the paired stack map too.
    ///
    /// Ring mode: the ring's records, with their stacks from `stacks0`,
    /// which is never emptied (no flip): when it is full, further new
    /// stacks are lost and counted.
    pub fn drain(
        &mut self,
        out: &mut Vec<(Key, u64)>,
        stacks: &mut HashMap<u64, Vec<u64>>,
    ) -> Result<(), Error> {
        if let Some((rb, buf)) = &self.ring {
            rb.consume().map_err(|e| kerr("consume ring buffer", e))?;
            out.extend(buf.borrow_mut().drain(..).map(|k| (k, 1)));
            read_stacks(&self.stack_maps[0], out, stacks);
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
        let sm = &self.stack_maps[old as usize];
        read_stacks(sm, out, stacks);
        let ids: Vec<Vec<u8>> = sm.keys().collect();
        for id in ids {
            let _ = sm.delete(&id);
        }
        Ok(())
    }

    /// run_time_ns and run_cnt of the program (kernel.bpf_stats / BPF_ENABLE_STATS).
    pub fn prog_run_stats(&self) -> (u64, u64) {
        mantle_sys::bpf::prog_run_stats(self.skel.progs.mp_sample.as_fd()).unwrap_or((0, 0))
    }
}

/// Reads the frames of every stack key `keys` name that `stacks` does not
/// hold yet. A missing key (not expected: stacks are only deleted after
/// their keys are drained) leaves the sample without that stack.
fn read_stacks(map: &MapHandle, keys: &[(Key, u64)], stacks: &mut HashMap<u64, Vec<u64>>) {
    for (k, _) in keys {
        for id in [k.kstack, k.ustack] {
            if id == crate::abi::NO_STACK || stacks.contains_key(&id) {
                continue;
            }
            if let Ok(Some(v)) = map.lookup(&id.to_ne_bytes(), MapFlags::ANY) {
                stacks.insert(id, crate::model::stack_frames(&v));
            }
        }
    }
}

/// Turns on the kernel's per-program run-time statistics while the fd lives.
pub fn enable_bpf_stats() -> Option<OwnedFd> {
    mantle_sys::bpf::enable_stats().ok()
}

// Stop signals, the gated child, the vDSO copy and memfd are mantle-sys's
// process calls, re-exported at their old paths.
pub use mantle_sys::os::{
    catch_stop_signals, memfd, spawn_gated, stderr_is_tty, stop_requested, vdso_image, Gate,
    GatedChild as Child,
};
