//! `record --off-cpu`: the off-CPU path loaded for the target, armed when
//! the recording starts, and its in-kernel totals turned into off-CPU
//! rows of the session.
//!
//! Mechanism: [`OffCpuRec::load`] loads offcpu.bpf.c with the target's
//! filter (-a: every thread; -p and a command: the process and what it
//! forks; --cgroup: the cgroup's tasks); [`OffCpuRec::arm`] sets the
//! start time (blocks that began earlier are not charged: a command's
//! wait at its gate) and attaches. Every drain reads the count map (never
//! emptied: the totals only grow) and adds what grew since the previous
//! drain; each (thread, kernel stack, user stack) is resolved once, the
//! first time it is seen, against the address spaces of that moment (as
//! the sample path's stacks are).
//!
//! Invariant: the time of a block is charged when the thread runs again,
//! so a thread still blocked when the recording stops has that last block
//! left out (as bcc's offcputime does).

use super::target::Tracee;
use super::Target;
use crate::abi::NO_STACK;
use crate::kernel::{OffCpuFilter, OffCpuPath};
use crate::model::{self, AddressSpaces, Mode, OffCpu, OffCpuInfo, OffCpuKey, Profile, Resolved};
use crate::Error;
use mantle_abi::offcpu::{OffKey, OffVal};
use std::collections::HashMap;
use std::os::fd::AsFd;

/// What was added of one in-kernel key so far, and where it was placed
/// (None: it had no stack at all).
struct Seen {
    added: OffVal,
    place: Option<OffCpuKey>,
}

/// The off-CPU side of a recording.
pub(super) struct OffCpuRec {
    path: OffCpuPath,
    seen: HashMap<OffKey, Seen>,
    frames: HashMap<u64, Vec<u64>>,
    buf: Vec<(OffKey, OffVal)>,
    /// Kernel text symbols, to cut kernel stacks at `__schedule`.
    kallsyms: model::Kallsyms,
    pub rows: OffCpu,
    unstacked: (u64, u64),
}

impl OffCpuRec {
    /// Loads the off-CPU path for `target` (whose tasks `tracee` holds).
    pub fn load(target: &Target, tracee: &Tracee) -> Result<OffCpuRec, Error> {
        let filter = match target {
            Target::All => OffCpuFilter::All,
            Target::Pid(_) | Target::Command(_) => OffCpuFilter::Tgids,
            Target::Cgroup(_) => OffCpuFilter::Cgroup,
        };
        let path = OffCpuPath::load(filter)?;
        match target {
            Target::Pid(p) => path.add_target(*p)?,
            Target::Command(_) => {
                if let Some(c) = &tracee.child {
                    path.add_target(c.pid)?;
                }
            }
            Target::Cgroup(_) => {
                if let Some(dir) = &tracee.cgroup {
                    path.set_cgroup(dir.as_fd())?;
                }
            }
            Target::All => {}
        }
        Ok(OffCpuRec {
            path,
            seen: HashMap::new(),
            frames: HashMap::new(),
            buf: Vec::new(),
            kallsyms: model::Kallsyms::parse(
                &std::fs::read_to_string("/proc/kallsyms").unwrap_or_default(),
            ),
            rows: OffCpu::default(),
            unstacked: (0, 0),
        })
    }

    /// Starts charging blocks (those that begin from now on) and attaches.
    pub fn arm(&mut self) -> Result<(), Error> {
        self.path.set_since(mantle_sys::os::monotonic_ns())?;
        self.path.attach()
    }

    /// Stops recording blocks (the totals stay readable).
    pub fn stop(&mut self) {
        self.path.detach();
    }

    /// Adds what the in-kernel totals gained since the last drain.
    /// `profile` holds the session's images and stacks; `fill` completes
    /// a resolution (build IDs).
    pub fn drain(
        &mut self,
        profile: &mut Profile,
        sp: &AddressSpaces,
        fill: &mut dyn FnMut(&mut Resolved),
    ) -> Result<(), Error> {
        self.buf.clear();
        self.path.read(&mut self.buf, &mut self.frames)?;
        for (k, v) in self.buf.drain(..) {
            let seen = match self.seen.get_mut(&k) {
                Some(s) => s,
                None => {
                    let get = |id: u64| -> &[u64] {
                        if id == NO_STACK {
                            &[]
                        } else {
                            self.frames.get(&id).map(Vec::as_slice).unwrap_or(&[])
                        }
                    };
                    let kernel = model::offcpu::from_switch(get(k.kstack), &self.kallsyms);
                    let all = model::callers(0, kernel, get(k.ustack));
                    let place = all.first().map(|&leaf| {
                        let mode = if leaf >= 0xffff_8000_0000_0000 {
                            Mode::Kernel
                        } else {
                            Mode::User
                        };
                        let mut r = sp.resolve(k.pid, leaf, mode);
                        fill(&mut r);
                        let image = profile.image_id(&r.image);
                        let stack = profile.add_stack(sp, k.pid, &all[1..], fill);
                        OffCpuKey {
                            pid: k.pid,
                            tid: k.tid,
                            mode,
                            image,
                            offset: r.offset,
                            stack,
                        }
                    });
                    self.seen.entry(k).or_insert(Seen {
                        added: OffVal::default(),
                        place,
                    })
                }
            };
            // the totals only grow; a smaller value (not expected) adds 0
            let ns = v.ns.saturating_sub(seen.added.ns);
            let blocks = v.blocks.saturating_sub(seen.added.blocks);
            if ns == 0 && blocks == 0 {
                continue;
            }
            seen.added = v;
            match seen.place {
                Some(place) => {
                    self.rows
                        .add(place, ns, blocks)
                        .map_err(|source| Error::Counts {
                            what: "off-CPU time read from the off-CPU path",
                            source,
                        })?
                }
                None => {
                    self.unstacked.0 = self.unstacked.0.saturating_add(blocks);
                    self.unstacked.1 = self.unstacked.1.saturating_add(ns);
                }
            }
        }
        Ok(())
    }

    /// What was recorded and lost, for meta.json.
    pub fn info(&self) -> OffCpuInfo {
        let st = self.path.stats();
        OffCpuInfo {
            ns: self.rows.total_ns(),
            blocks: self
                .rows
                .rows()
                .values()
                .fold(0, |a, t| a.saturating_add(t.blocks)),
            dropped_blocks: st.dropped,
            dropped_ns: st.dropped_ns,
            start_lost: st.start_lost,
            stack_lost: st.stack_lost,
            unstacked_blocks: self.unstacked.0,
            unstacked_ns: self.unstacked.1,
        }
    }
}
