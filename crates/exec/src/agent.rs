//! Interposition agents (Hijack, section 2): the pure core of the
//! executive. An agent sees a guest's system call as a [`Call`], may read
//! (and, where the path allows, write) the guest's memory through a
//! [`Guest`], and returns a [`Decision`]. Agents are chained in order
//! ([`Chain`]); the first that does not answer [`Decision::Continue`]
//! decides. Each agent declares the calls it needs ([`Agent::wants`]): only
//! those leave the kernel (the seccomp filter and the fast path's trap are
//! built from the union), every other call runs natively.
//!
//! No system calls here: the paths (protected, fast) implement [`Guest`]
//! and carry the decision out; agents are unit-tested with a fake guest.
//!
//! Trust: everything a `Guest` returns is the guest's claim. An agent that
//! makes a security decision from guest memory (a path, say) must not
//! answer `Continue` on it (the guest can change the memory between the
//! check and the kernel's own read: the TOCTOU of seccomp user
//! notification); it answers `Perform` or `Fail`, so that what runs is
//! what was checked.

use crate::sysno::Sysno;
use std::time::Duration;

/// One system call of a guest thread, as the executive received it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Call {
    /// Thread id of the caller (in the executive's pid namespace).
    pub tid: u32,
    pub nr: Sysno,
    pub args: [u64; 6],
    /// Instruction pointer of the call.
    pub ip: u64,
    /// CLOCK_MONOTONIC ns when the executive received the call (0: not
    /// known): the end of the one-way trap (agents::stamp).
    pub received_ns: u64,
    /// CLOCK_MONOTONIC ns when the guest made the call, as near as known
    /// (0: not known): the receipt on the protected path (the kernel says
    /// nothing earlier); on the fast path the guest's own stamp at its
    /// trap, a claim the executive keeps between the receipt and
    /// [`START_SLACK_NS`] before it (a guest that lies can only shorten its
    /// own sleeps, which it could do by not sleeping). Timing agents count
    /// from it, so that the trap is not added to a sleep.
    pub start_ns: u64,
}

/// How much earlier than its receipt a call's [`Call::start_ns`] may be.
pub const START_SLACK_NS: u64 = 1_000_000;

/// What happens to a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The kernel runs the call as the guest made it.
    Continue,
    /// The call is not made; it fails with this errno.
    Fail(i32),
    /// The call is not made; it returns this value.
    Return(i64),
    /// A changed call is made on the guest's behalf instead, with the
    /// guest's identity (credentials, cwd, root); its result is the
    /// guest's. Which calls a path can perform is its business
    /// (the protected path: [`crate::perform`]); others fail with ENOSYS, said in the trace.
    Perform(Perform),
    /// Hold the call for this long, then decide again (the delay agent;
    /// the scheduler of issue 11 holds calls the same way).
    Delay(Duration),
    /// The call returns 0 and the executive keeps a timer for the
    /// caller's thread group instead of the kernel (the timers agent:
    /// setitimer/alarm), which it fires at its own priority.
    Timer(Timer),
    /// The call (the guest's sched_setscheduler and the like) returns 0
    /// when the executive's policy takes these parameters for the caller's
    /// guest, and fails with EBUSY when it refuses them (admission), as
    /// SCHED_DEADLINE does.
    Sched(crate::sched::Params),
    /// The caller's guest gives up the rest of its turn (the guest's
    /// `sched_yield`, to the executive's policy); the call returns 0.
    Yield,
}

/// A timer the executive keeps for a guest's thread group: `signal` is
/// sent `first` after the call's receipt, then every `interval` (zero:
/// once). One timer per thread group and signal: a new one replaces it;
/// `first` zero disarms it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer {
    pub signal: i32,
    pub first: Duration,
    pub interval: Duration,
}

/// A call to perform on a guest's behalf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Perform {
    pub nr: Sysno,
    pub args: [u64; 6],
    /// Replacement for the path argument `path_arg` (open/stat/exec
    /// families), made by the executive, not read from the guest again.
    pub path: Option<(usize, Vec<u8>)>,
}

/// How a call ended, for agents' `after` (what the executive saw).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The executive made or replaced the call: its result (or -errno).
    Result(i64),
    /// The kernel ran the call in the guest (`Continue` on the protected
    /// path): the executive does not see its result.
    Unseen,
}

/// Why a guest's memory could not be read or written.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum GuestError {
    /// The address is not mapped in the guest (or not readable).
    #[error("bad guest address {0:#x}")]
    Fault(u64),
    /// A string ran past the limit without its NUL.
    #[error("string at {addr:#x} longer than {max} bytes")]
    TooLong { addr: u64, max: usize },
    /// The call was abandoned meanwhile (the guest was killed, or a
    /// signal interrupted it): whatever was read is stale.
    #[error("the call is gone")]
    Gone,
    /// The path cannot do this (e.g. write memory on the protected path).
    #[error("not supported on this path: {0}")]
    Unsupported(&'static str),
    #[error("{0}")]
    Os(String),
}

impl GuestError {
    /// The error of reading or writing guest memory at `addr` with
    /// process_vm_readv/writev: an unmapped address is a fault, a task
    /// that is gone is `Gone`, anything else keeps its words.
    pub fn of_memory(e: &std::io::Error, addr: u64) -> GuestError {
        match e.raw_os_error() {
            Some(libc::EFAULT) | Some(libc::EIO) => GuestError::Fault(addr),
            Some(libc::ESRCH) => GuestError::Gone,
            _ => GuestError::Os(e.to_string()),
        }
    }
}

/// A guest as an agent sees it during one call.
pub trait Guest {
    /// Reads guest memory at `addr` into `buf`; returns the bytes read
    /// (short near the end of a mapping).
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, GuestError>;
    /// Whether the call is still pending: after reading guest memory, an
    /// agent that acts on what it read asks this (a recycled tid could
    /// otherwise make the executive read another process's memory).
    fn still_pending(&mut self) -> bool;

    /// Writes `buf` into guest memory at `addr` (an answer the kernel
    /// would have written, e.g. `sched_getparam`'s); returns the bytes
    /// written. Only while the call is pending: a path checks that first.
    fn write(&mut self, _addr: u64, _buf: &[u8]) -> Result<usize, GuestError> {
        Err(GuestError::Unsupported("write guest memory"))
    }

    /// Reads a NUL-terminated string of at most `max` bytes (without the
    /// NUL).
    fn read_cstr(&mut self, addr: u64, max: usize) -> Result<Vec<u8>, GuestError> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 256];
        while out.len() < max {
            // stay inside one page per read: the next may be unmapped
            let room = 4096 - ((addr as usize + out.len()) % 4096);
            let want = room.min(chunk.len()).min(max - out.len());
            let n = self.read(addr + out.len() as u64, &mut chunk[..want])?;
            if n == 0 {
                return Err(GuestError::Fault(addr + out.len() as u64));
            }
            if let Some(end) = chunk[..n].iter().position(|&c| c == 0) {
                out.extend_from_slice(&chunk[..end]);
                return Ok(out);
            }
            out.extend_from_slice(&chunk[..n]);
        }
        Err(GuestError::TooLong { addr, max })
    }
}

/// An interposition agent.
pub trait Agent: Send {
    /// Short name, for traces and `exec status`.
    fn name(&self) -> &str;
    /// The calls this agent needs to see.
    fn wants(&self) -> Vec<Sysno>;
    /// Decides a call (before it is made).
    fn before(&mut self, call: &Call, guest: &mut dyn Guest) -> Decision;
    /// Sees how a call ended, with the time it took in the kernel (when
    /// the executive made it) and in the executive.
    fn after(&mut self, _call: &Call, _decision: &Decision, _outcome: Outcome, _times: Times) {}
    /// The guest's first process was forked with this pid; its next call
    /// of the exec family is the launcher's exec of the command.
    fn started(&mut self, _pid: u32) {}
}

/// Where a call's time went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Times {
    /// In the executive (agents and bookkeeping), ns.
    pub executive_ns: u64,
    /// In the kernel, ns, when the executive made the call; 0 otherwise.
    pub kernel_ns: u64,
}

/// Call numbers the chain keeps a bitmap for; a call above it (a guest's
/// garbage, or a kernel far newer than the table) is wanted by nobody.
pub const MAX_NR: u32 = 1024;

/// Agents in order, with each one's wanted calls as a bitmap made once
/// (the per-call path asks "who wants this?" without allocating).
#[derive(Default)]
pub struct Chain {
    agents: Vec<Box<dyn Agent>>,
    /// `wanted[i]` bit `nr`: agent i wants call nr.
    wanted: Vec<[u64; (MAX_NR / 64) as usize]>,
}

impl Chain {
    pub fn new(agents: Vec<Box<dyn Agent>>) -> Chain {
        let wanted = agents
            .iter()
            .map(|a| {
                let mut m = [0u64; (MAX_NR / 64) as usize];
                for nr in a.wants() {
                    if nr.0 < MAX_NR {
                        m[(nr.0 / 64) as usize] |= 1 << (nr.0 % 64);
                    }
                }
                m
            })
            .collect();
        Chain { agents, wanted }
    }

    fn agent_wants(&self, i: usize, nr: Sysno) -> bool {
        nr.0 < MAX_NR && self.wanted[i][(nr.0 / 64) as usize] & (1 << (nr.0 % 64)) != 0
    }

    /// The union of the calls the agents want, sorted, without repeats.
    pub fn wants(&self) -> Vec<Sysno> {
        (0..MAX_NR)
            .map(Sysno)
            .filter(|&nr| (0..self.agents.len()).any(|i| self.agent_wants(i, nr)))
            .collect()
    }

    /// Whether any agent wants call `nr`.
    pub fn wanted(&self, nr: Sysno) -> bool {
        (0..self.agents.len()).any(|i| self.agent_wants(i, nr))
    }

    /// The first agent (in order) that wants this call and does not
    /// continue decides; the index of that agent comes with it.
    pub fn before(&mut self, call: &Call, guest: &mut dyn Guest) -> (Decision, Option<usize>) {
        for i in 0..self.agents.len() {
            if !self.agent_wants(i, call.nr) {
                continue;
            }
            let a = &mut self.agents[i];
            match a.before(call, guest) {
                Decision::Continue => {}
                d => return (d, Some(i)),
            }
        }
        (Decision::Continue, None)
    }

    /// Every agent that wants the call sees how it ended.
    pub fn after(&mut self, call: &Call, d: &Decision, o: Outcome, t: Times) {
        for i in 0..self.agents.len() {
            if self.agent_wants(i, call.nr) {
                self.agents[i].after(call, d, o, t);
            }
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.agents.iter().map(|a| a.name().to_string()).collect()
    }

    /// Tells every agent the pid of the guest's first process.
    pub fn started(&mut self, pid: u32) {
        for a in &mut self.agents {
            a.started(pid);
        }
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A guest made of a byte map, for unit tests of agents.
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Default)]
    pub struct FakeGuest {
        /// address → bytes (one region per entry)
        pub mem: BTreeMap<u64, Vec<u8>>,
        pub gone: bool,
    }

    impl Guest for FakeGuest {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, GuestError> {
            if self.gone {
                return Err(GuestError::Gone);
            }
            let (&base, bytes) = self
                .mem
                .range(..=addr)
                .next_back()
                .ok_or(GuestError::Fault(addr))?;
            let off = (addr - base) as usize;
            if off >= bytes.len() {
                return Err(GuestError::Fault(addr));
            }
            let n = buf.len().min(bytes.len() - off);
            buf[..n].copy_from_slice(&bytes[off..off + n]);
            Ok(n)
        }
        fn still_pending(&mut self) -> bool {
            !self.gone
        }
        fn write(&mut self, addr: u64, buf: &[u8]) -> Result<usize, GuestError> {
            if self.gone {
                return Err(GuestError::Gone);
            }
            let (&base, bytes) = self
                .mem
                .range_mut(..=addr)
                .next_back()
                .ok_or(GuestError::Fault(addr))?;
            let off = (addr - base) as usize;
            if off + buf.len() > bytes.len() {
                return Err(GuestError::Fault(addr));
            }
            bytes[off..off + buf.len()].copy_from_slice(buf);
            Ok(buf.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeGuest;
    use super::*;

    struct Fixed(&'static str, Sysno, Decision);
    impl Agent for Fixed {
        fn name(&self) -> &str {
            self.0
        }
        fn wants(&self) -> Vec<Sysno> {
            vec![self.1]
        }
        fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
            self.2.clone()
        }
    }

    fn call(nr: &str) -> Call {
        Call {
            tid: 1,
            nr: Sysno::from_name(nr).unwrap(),
            args: [0; 6],
            ip: 0,
            received_ns: 0,
            start_ns: 0,
        }
    }

    #[test]
    fn first_agent_that_does_not_continue_decides() {
        let getppid = Sysno::from_name("getppid").unwrap();
        let openat = Sysno::from_name("openat").unwrap();
        let mut c = Chain::new(vec![
            Box::new(Fixed("a", getppid, Decision::Continue)),
            Box::new(Fixed("b", openat, Decision::Fail(13))),
            Box::new(Fixed("c", getppid, Decision::Return(7))),
            Box::new(Fixed("d", getppid, Decision::Fail(1))),
        ]);
        let mut both = vec![getppid, openat];
        both.sort();
        assert_eq!(c.wants(), both);
        let mut g = FakeGuest::default();
        assert_eq!(
            c.before(&call("getppid"), &mut g),
            (Decision::Return(7), Some(2))
        );
        assert_eq!(
            c.before(&call("openat"), &mut g),
            (Decision::Fail(13), Some(1))
        );
        assert_eq!(c.before(&call("read"), &mut g), (Decision::Continue, None));
        // a number beyond the bitmap (garbage from a guest) is nobody's
        let mut odd = call("read");
        odd.nr = Sysno(u32::MAX);
        assert_eq!(c.before(&odd, &mut g), (Decision::Continue, None));
        assert!(!c.wanted(Sysno(u32::MAX)));
    }

    struct Wants(Vec<Sysno>);
    impl Agent for Wants {
        fn name(&self) -> &str {
            "wants"
        }
        fn wants(&self) -> Vec<Sysno> {
            self.0.clone()
        }
        fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
            Decision::Return(1)
        }
    }

    /// Every call number the bitmap holds, alone and all together: an
    /// agent is asked for exactly the calls it wants.
    #[test]
    fn the_wanted_bitmap_holds_every_number() {
        let all: Vec<Sysno> = (0..MAX_NR).map(Sysno).collect();
        let c = Chain::new(vec![Box::new(Wants(all.clone()))]);
        assert_eq!(c.wants(), all);
        for nr in 0..MAX_NR {
            let mut c = Chain::new(vec![Box::new(Wants(vec![Sysno(nr)]))]);
            assert_eq!(c.wants(), vec![Sysno(nr)]);
            let mut g = FakeGuest::default();
            for other in [nr.wrapping_sub(1), nr, nr + 1, nr + 64, MAX_NR] {
                let call = Call {
                    tid: 1,
                    nr: Sysno(other),
                    args: [0; 6],
                    ip: 0,
                    received_ns: 0,
                    start_ns: 0,
                };
                let want = if other == nr {
                    (Decision::Return(1), Some(0))
                } else {
                    (Decision::Continue, None)
                };
                assert_eq!(c.before(&call, &mut g), want, "wants {nr}, call {other}");
            }
        }
    }

    #[test]
    fn cstr_reads_across_chunks_and_refuses_what_it_cannot_end() {
        let mut g = FakeGuest::default();
        let long: Vec<u8> = (0..600).map(|i| b'a' + (i % 26) as u8).chain([0]).collect();
        g.mem.insert(0x1000, long.clone());
        assert_eq!(g.read_cstr(0x1000, 4096).unwrap(), long[..600].to_vec());
        assert_eq!(
            g.read_cstr(0x1000, 100),
            Err(GuestError::TooLong {
                addr: 0x1000,
                max: 100
            })
        );
        // no NUL before the region ends: the next read faults
        g.mem.insert(0x9000, b"abc".to_vec());
        assert_eq!(g.read_cstr(0x9000, 100), Err(GuestError::Fault(0x9003)));
        assert_eq!(g.read_cstr(0x20, 10), Err(GuestError::Fault(0x20)));
        g.gone = true;
        assert_eq!(g.read_cstr(0x1000, 10), Err(GuestError::Gone));
    }
}
