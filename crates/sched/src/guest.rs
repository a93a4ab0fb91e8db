//! A guest's own scheduling calls mapped onto the executive's policy
//! (seeds/001 section 2.2: "interposition code for POSIX system calls such
//! as `sched_setscheduler()` and `sched_setparam()` ... so that a policy of
//! type `SCHED_OTHER` mimics that of earliest-deadline first").
//!
//! Pure functions over the numbers and bytes the guest passed: the
//! executive reads `struct sched_param` / `struct sched_attr` from the
//! guest's memory, calls these, and either changes the task's policy
//! ([`Policy::change`](super::Policy::change) with [`GuestSched::params`])
//! and returns 0, or returns `-`[`GuestSchedError::errno`]. They follow
//! Linux's own validation (kernel/sched/syscalls.c `sched_copy_attr`,
//! `__sched_setscheduler`; kernel/sched/deadline.c `__checkparam_dl`), so
//! a guest sees the errors it would see natively; where Linux clamps
//! (nice) we clamp too. Garbage is an error, never a panic.
//!
//! What each call becomes:
//!
//! | guest asks                         | executive's [`Params`]                          |
//! |------------------------------------|-------------------------------------------------|
//! | SCHED_OTHER, SCHED_BATCH, SCHED_EXT | `BestEffort { nice }` (the task's nice)        |
//! | SCHED_IDLE                         | `BestEffort { nice: 19 }` (our lowest weight)    |
//! | SCHED_FIFO, priority 1..=99        | `Fixed { prio, quantum_ns: None }`               |
//! | SCHED_RR, priority 1..=99          | `Fixed { prio, quantum_ns: Some(100 ms) }` (Linux's default `sched_rr_timeslice_ms`) |
//! | SCHED_DEADLINE runtime/deadline/period | `Edf { budget: runtime, deadline, period }` (period 0 = deadline) |
//! | `sched_yield`                      | [`Policy::yield_now`](super::Policy::yield_now)  |
//! | `setpriority(PRIO_PROCESS, ..)`/`nice` | the nice of [`GuestSched`]; the params if best effort |
//!
//! The executive keeps a [`GuestSched`] per guest thread (what the guest
//! believes it set: policy number, nice, flags) so that `sched_get*`
//! answer what the guest set ([`getscheduler`], [`getparam`],
//! [`getattr`]), and so that a nice set while real-time survives a return
//! to SCHED_OTHER, as in Linux.
//!
//! Accepted and ignored: SCHED_FLAG_RECLAIM (no GRUB), utilisation clamps
//! (validated and remembered; the executive's CPU has no frequency), the
//! slice a SCHED_OTHER task may put in `sched_runtime` (Linux 6.12+).
//! SCHED_FLAG_DL_OVERRUN is kept in [`GuestSched::dl_overrun`] so the
//! executive can send SIGXCPU on a throttle. Permission checks
//! (CAP_SYS_NICE, RLIMIT_RTPRIO) are not made here: inside the executive
//! a guest can only reserve what admission (EDF's bound) grants.
//! `SCHED_FLAG_SUGOV` (kernel-internal) is refused as for any user.

use super::{ParamError, Params, NICE_MAX, NICE_MIN, PRIO_MAX};

/// Linux policy numbers (include/uapi/linux/sched.h).
pub const SCHED_OTHER: u32 = 0;
pub const SCHED_FIFO: u32 = 1;
pub const SCHED_RR: u32 = 2;
pub const SCHED_BATCH: u32 = 3;
/// Reserved by Linux, never implemented: refused.
pub const SCHED_ISO: u32 = 4;
pub const SCHED_IDLE: u32 = 5;
pub const SCHED_DEADLINE: u32 = 6;
pub const SCHED_EXT: u32 = 7;
/// Or-ed into `sched_setscheduler`'s policy.
pub const SCHED_RESET_ON_FORK: i32 = 0x4000_0000;

/// `sched_attr.sched_flags` bits.
pub const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
pub const SCHED_FLAG_RECLAIM: u64 = 0x02;
pub const SCHED_FLAG_DL_OVERRUN: u64 = 0x04;
pub const SCHED_FLAG_KEEP_POLICY: u64 = 0x08;
pub const SCHED_FLAG_KEEP_PARAMS: u64 = 0x10;
pub const SCHED_FLAG_UTIL_CLAMP_MIN: u64 = 0x20;
pub const SCHED_FLAG_UTIL_CLAMP_MAX: u64 = 0x40;
/// Every flag a user may pass (Linux `SCHED_FLAG_ALL`).
pub const SCHED_FLAG_ALL: u64 = 0x7f;

/// `struct sched_attr` sizes: the first version, and the current one
/// (with the utilisation clamps), which is what Linux writes back into
/// `attr->size` on E2BIG.
pub const SCHED_ATTR_SIZE_VER0: usize = 48;
pub const SCHED_ATTR_SIZE_VER1: usize = 56;
/// Largest `size` Linux reads (`PAGE_SIZE`).
pub const SCHED_ATTR_SIZE_MAX: usize = 4096;

/// Linux's default SCHED_RR quantum (`sched_rr_timeslice_ms`, 100 ms).
pub const RR_TIMESLICE_NS: u64 = 100_000_000;
/// SCHED_DEADLINE runtime floor (`1 << DL_SCALE` ns).
pub const DL_RUNTIME_MIN_NS: u64 = 1 << 10;
/// SCHED_DEADLINE period bounds (`sched_deadline_period_{min,max}_us`
/// defaults: 100 µs and 2^22 µs).
pub const DL_PERIOD_MIN_NS: u64 = 100_000;
pub const DL_PERIOD_MAX_NS: u64 = (1 << 22) * 1_000;
/// Utilisation clamp scale (`SCHED_CAPACITY_SCALE`).
pub const UCLAMP_MAX: u32 = 1024;

const PRIO_PROCESS: i32 = 0;
const PRIO_USER: i32 = 2;

/// Why a guest's call is refused; [`GuestSchedError::errno`] is what the
/// guest gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GuestSchedError {
    #[error("unknown or unsupported policy {0}")]
    Policy(i64),
    #[error("priority {priority} is not valid for policy {policy}")]
    Priority { policy: u32, priority: i64 },
    #[error("unknown scheduling flags {0:#x}")]
    Flags(u64),
    #[error("the system call's flags argument must be 0, not {0}")]
    CallFlags(u32),
    /// E2BIG: the guest must be told the size we know
    /// ([`SCHED_ATTR_SIZE_VER1`]) in `attr->size`, as Linux does.
    #[error("sched_attr size {0} is not supported")]
    Size(u32),
    #[error("sched_attr has non-zero bytes past what is known, at offset {0}")]
    Tail(usize),
    #[error("only {have} bytes of sched_attr could be read, {need} are needed")]
    Short { have: usize, need: usize },
    #[error("utilisation clamps need a sched_attr of at least {SCHED_ATTR_SIZE_VER1} bytes")]
    ClampSize,
    #[error("utilisation clamp min {min} / max {max} is not valid")]
    Clamp { min: u32, max: u32 },
    #[error("SCHED_DEADLINE parameters: {0}")]
    Deadline(&'static str),
    #[error("setpriority: `which` {0} is not valid")]
    Which(i32),
    #[error("sched_getattr size {0} is not valid")]
    GetSize(u32),
    #[error(transparent)]
    Params(#[from] ParamError),
}

impl GuestSchedError {
    /// The errno Linux returns in the same case.
    pub fn errno(&self) -> i32 {
        match self {
            GuestSchedError::Size(_) | GuestSchedError::Tail(_) => libc::E2BIG,
            GuestSchedError::Short { .. } => libc::EFAULT,
            _ => libc::EINVAL,
        }
    }
}

/// What a guest thread has set, as it sees it, and the executive's
/// parameters for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GuestSched {
    /// The Linux policy number the guest set (0..=7 but 4).
    pub policy: u32,
    /// What the executive schedules it by.
    pub params: Params,
    /// The nice value (kept while real-time, as Linux's static priority).
    pub nice: i8,
    pub reset_on_fork: bool,
    /// SCHED_FLAG_DL_OVERRUN: signal SIGXCPU when the budget runs out.
    pub dl_overrun: bool,
    pub reclaim: bool,
    pub util_min: u32,
    pub util_max: u32,
}

impl Default for GuestSched {
    /// A new thread: SCHED_OTHER at nice 0.
    fn default() -> Self {
        GuestSched {
            policy: SCHED_OTHER,
            params: Params::BestEffort { nice: 0 },
            nice: 0,
            reset_on_fork: false,
            dl_overrun: false,
            reclaim: false,
            util_min: 0,
            util_max: UCLAMP_MAX,
        }
    }
}

/// A decoded `struct sched_attr` (layout: include/uapi/linux/sched/types.h):
/// `u32 size @0, u32 sched_policy @4, u64 sched_flags @8, i32 sched_nice
/// @16, u32 sched_priority @20, u64 sched_runtime @24, u64 sched_deadline
/// @32, u64 sched_period @40, u32 sched_util_min @48, u32 sched_util_max
/// @52`, native endianness.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attr {
    pub policy: u32,
    pub flags: u64,
    pub nice: i32,
    pub priority: u32,
    pub runtime: u64,
    pub deadline: u64,
    pub period: u64,
    pub util_min: u32,
    pub util_max: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// How many bytes of `struct sched_attr` the executive must read, from its
/// first four (the `size` field): 0 means the first version; sizes below
/// it or above a page are E2BIG.
pub fn attr_size(size_field: u32) -> Result<usize, GuestSchedError> {
    let size = if size_field == 0 {
        SCHED_ATTR_SIZE_VER0
    } else {
        size_field as usize
    };
    if !(SCHED_ATTR_SIZE_VER0..=SCHED_ATTR_SIZE_MAX).contains(&size) {
        return Err(GuestSchedError::Size(size_field));
    }
    Ok(size)
}

/// Decodes the bytes the guest passed to `sched_setattr` (at least
/// [`attr_size`] of them; more are ignored), as `sched_copy_attr`:
/// unknown trailing bytes must be zero, utilisation clamps need the
/// second version, nice is clamped to `-20..=19`.
pub fn decode_attr(bytes: &[u8]) -> Result<Attr, GuestSchedError> {
    if bytes.len() < 4 {
        return Err(GuestSchedError::Short {
            have: bytes.len(),
            need: 4,
        });
    }
    let size = attr_size(u32_at(bytes, 0))?;
    if bytes.len() < size {
        return Err(GuestSchedError::Short {
            have: bytes.len(),
            need: size,
        });
    }
    if let Some(off) = bytes[SCHED_ATTR_SIZE_VER1.min(size)..size]
        .iter()
        .position(|&b| b != 0)
    {
        return Err(GuestSchedError::Tail(SCHED_ATTR_SIZE_VER1 + off));
    }
    let mut a = Attr {
        policy: u32_at(bytes, 4),
        flags: u64_at(bytes, 8),
        nice: u32_at(bytes, 16) as i32,
        priority: u32_at(bytes, 20),
        runtime: u64_at(bytes, 24),
        deadline: u64_at(bytes, 32),
        period: u64_at(bytes, 40),
        util_min: 0,
        util_max: 0,
    };
    if size >= SCHED_ATTR_SIZE_VER1 {
        a.util_min = u32_at(bytes, 48);
        a.util_max = u32_at(bytes, 52);
    } else if a.flags & (SCHED_FLAG_UTIL_CLAMP_MIN | SCHED_FLAG_UTIL_CLAMP_MAX) != 0 {
        return Err(GuestSchedError::ClampSize);
    }
    a.nice = a.nice.clamp(NICE_MIN.into(), NICE_MAX.into());
    Ok(a)
}

/// Encodes `attr` as the first `len` bytes (at most
/// [`SCHED_ATTR_SIZE_VER1`]) of a `struct sched_attr` whose size field is
/// `len`.
pub fn encode_attr(attr: &Attr, len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(SCHED_ATTR_SIZE_VER1);
    let len = len.min(SCHED_ATTR_SIZE_VER1);
    b.extend_from_slice(&(len as u32).to_ne_bytes());
    b.extend_from_slice(&attr.policy.to_ne_bytes());
    b.extend_from_slice(&attr.flags.to_ne_bytes());
    b.extend_from_slice(&attr.nice.to_ne_bytes());
    b.extend_from_slice(&attr.priority.to_ne_bytes());
    b.extend_from_slice(&attr.runtime.to_ne_bytes());
    b.extend_from_slice(&attr.deadline.to_ne_bytes());
    b.extend_from_slice(&attr.period.to_ne_bytes());
    b.extend_from_slice(&attr.util_min.to_ne_bytes());
    b.extend_from_slice(&attr.util_max.to_ne_bytes());
    b.truncate(len);
    b
}

/// `__checkparam_dl`, with the reason.
fn check_dl(a: &Attr) -> Result<(u64, u64, u64), GuestSchedError> {
    let bad = |why| Err(GuestSchedError::Deadline(why));
    if a.deadline == 0 {
        return bad("deadline is zero");
    }
    if a.runtime < DL_RUNTIME_MIN_NS {
        return bad("runtime is below 1024 ns");
    }
    if a.deadline & (1 << 63) != 0 || a.period & (1 << 63) != 0 {
        return bad("deadline or period has its top bit set");
    }
    let period = if a.period == 0 { a.deadline } else { a.period };
    if period < a.deadline {
        return bad("period is shorter than the deadline");
    }
    if a.deadline < a.runtime {
        return bad("deadline is shorter than the runtime");
    }
    if !(DL_PERIOD_MIN_NS..=DL_PERIOD_MAX_NS).contains(&period) {
        return bad("period is outside 100 us ..= 2^22 us");
    }
    Ok((a.runtime, a.deadline, period))
}

fn is_rt(policy: u32) -> bool {
    policy == SCHED_FIFO || policy == SCHED_RR
}

fn is_fair(policy: u32) -> bool {
    matches!(policy, SCHED_OTHER | SCHED_BATCH | SCHED_EXT)
}

/// The current settings as a `sched_attr` (Linux `get_params` plus the
/// policy and flags), for KEEP_PARAMS and `sched_getattr`.
fn current_attr(cur: &GuestSched) -> Attr {
    let mut a = Attr {
        policy: cur.policy,
        flags: [
            (cur.reset_on_fork, SCHED_FLAG_RESET_ON_FORK),
            (cur.reclaim, SCHED_FLAG_RECLAIM),
            (cur.dl_overrun, SCHED_FLAG_DL_OVERRUN),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .fold(0, |acc, (_, bit)| acc | bit),
        nice: cur.nice.into(),
        util_min: cur.util_min,
        util_max: cur.util_max,
        ..Attr::default()
    };
    match cur.params {
        Params::Fixed { prio, .. } => a.priority = prio.into(),
        Params::Edf {
            period_ns,
            budget_ns,
            deadline_ns,
        } => {
            a.runtime = budget_ns;
            a.deadline = deadline_ns;
            a.period = period_ns;
        }
        _ => {}
    }
    a
}

/// `__sched_setscheduler`'s checks and the mapping onto [`Params`].
/// `keep_reset`: `sched_setparam` keeps reset-on-fork as it was.
fn apply(cur: &GuestSched, a: &Attr, keep_reset: bool) -> Result<GuestSched, GuestSchedError> {
    let policy = a.policy;
    if !matches!(policy, 0..=3 | 5..=7) {
        return Err(GuestSchedError::Policy(policy.into()));
    }
    if a.flags & !SCHED_FLAG_ALL != 0 {
        return Err(GuestSchedError::Flags(a.flags & !SCHED_FLAG_ALL));
    }
    let bad_prio = GuestSchedError::Priority {
        policy,
        priority: a.priority.into(),
    };
    if a.priority > u32::from(PRIO_MAX) || is_rt(policy) != (a.priority != 0) {
        return Err(bad_prio);
    }
    let dl = if policy == SCHED_DEADLINE {
        Some(check_dl(a)?)
    } else {
        None
    };
    // uclamp_validate: -1 resets, anything else above the scale is bad.
    let mut util_min = cur.util_min;
    let mut util_max = cur.util_max;
    if a.flags & SCHED_FLAG_UTIL_CLAMP_MIN != 0 {
        if a.util_min != u32::MAX && a.util_min > UCLAMP_MAX {
            return Err(GuestSchedError::Clamp {
                min: a.util_min,
                max: a.util_max,
            });
        }
        util_min = if a.util_min == u32::MAX {
            0
        } else {
            a.util_min
        };
    }
    if a.flags & SCHED_FLAG_UTIL_CLAMP_MAX != 0 {
        if a.util_max != u32::MAX && a.util_max > UCLAMP_MAX {
            return Err(GuestSchedError::Clamp {
                min: a.util_min,
                max: a.util_max,
            });
        }
        util_max = if a.util_max == u32::MAX {
            UCLAMP_MAX
        } else {
            a.util_max
        };
    }
    if util_min > util_max {
        return Err(GuestSchedError::Clamp {
            min: util_min,
            max: util_max,
        });
    }
    let nice = if is_fair(policy) {
        a.nice.clamp(NICE_MIN.into(), NICE_MAX.into()) as i8
    } else {
        cur.nice
    };
    let prio = a.priority as u8;
    let params = match policy {
        SCHED_FIFO => Params::Fixed {
            prio,
            quantum_ns: None,
        },
        SCHED_RR => Params::Fixed {
            prio,
            quantum_ns: Some(RR_TIMESLICE_NS),
        },
        SCHED_IDLE => Params::BestEffort { nice: NICE_MAX },
        SCHED_DEADLINE => {
            let (runtime, deadline, period) = dl.expect("checked above");
            Params::Edf {
                period_ns: period,
                budget_ns: runtime,
                deadline_ns: deadline,
            }
        }
        _ => Params::BestEffort { nice },
    };
    params.check()?;
    Ok(GuestSched {
        policy,
        params,
        nice,
        reset_on_fork: if keep_reset {
            cur.reset_on_fork
        } else {
            a.flags & SCHED_FLAG_RESET_ON_FORK != 0
        },
        dl_overrun: a.flags & SCHED_FLAG_DL_OVERRUN != 0,
        reclaim: a.flags & SCHED_FLAG_RECLAIM != 0,
        util_min,
        util_max,
    })
}

/// `sched_setscheduler(pid, policy, &param)`: `policy` as the guest
/// passed it (SCHED_RESET_ON_FORK may be or-ed in), `sched_priority` read
/// from its `struct sched_param`.
pub fn setscheduler(
    cur: &GuestSched,
    policy: i32,
    sched_priority: i32,
) -> Result<GuestSched, GuestSchedError> {
    if policy < 0 {
        return Err(GuestSchedError::Policy(policy.into()));
    }
    let reset = policy & SCHED_RESET_ON_FORK != 0;
    let a = Attr {
        policy: (policy & !SCHED_RESET_ON_FORK) as u32,
        flags: u64::from(reset) * SCHED_FLAG_RESET_ON_FORK,
        nice: cur.nice.into(),
        priority: sched_priority as u32,
        ..Attr::default()
    };
    // Linux reports the priority before the policy for out-of-range ones.
    apply(cur, &a, false).map_err(|e| match e {
        GuestSchedError::Priority { policy, .. } => GuestSchedError::Priority {
            policy,
            priority: sched_priority.into(),
        },
        e => e,
    })
}

/// `sched_setparam(pid, &param)`: the same policy, a new priority. As in
/// Linux, a SCHED_DEADLINE task cannot use it (EINVAL).
pub fn setparam(cur: &GuestSched, sched_priority: i32) -> Result<GuestSched, GuestSchedError> {
    let a = Attr {
        policy: cur.policy,
        priority: sched_priority as u32,
        nice: cur.nice.into(),
        ..Attr::default()
    };
    apply(cur, &a, true).map_err(|e| match e {
        GuestSchedError::Priority { policy, .. } => GuestSchedError::Priority {
            policy,
            priority: sched_priority.into(),
        },
        e => e,
    })
}

/// `sched_setattr(pid, attr, flags)`: `bytes` are what the executive read
/// at `attr` (at least [`attr_size`] of its size field), `flags` the
/// call's third argument.
pub fn setattr(cur: &GuestSched, bytes: &[u8], flags: u32) -> Result<GuestSched, GuestSchedError> {
    if flags != 0 {
        return Err(GuestSchedError::CallFlags(flags));
    }
    let mut a = decode_attr(bytes)?;
    if (a.policy as i32) < 0 {
        return Err(GuestSchedError::Policy((a.policy as i32).into()));
    }
    if a.flags & SCHED_FLAG_KEEP_POLICY != 0 {
        a.policy = cur.policy;
    }
    if a.flags & SCHED_FLAG_KEEP_PARAMS != 0 {
        let k = current_attr(cur);
        a.nice = k.nice;
        a.priority = k.priority;
        a.runtime = k.runtime;
        a.deadline = k.deadline;
        a.period = k.period;
    }
    a.flags &= !(SCHED_FLAG_KEEP_POLICY | SCHED_FLAG_KEEP_PARAMS);
    apply(cur, &a, false)
}

/// `setpriority(which, who, niceval)` (and glibc's `nice`, which calls
/// it): `which` must be PRIO_PROCESS, PRIO_PGRP or PRIO_USER (whom it
/// reaches is the executive's business); `niceval` is clamped to
/// `-20..=19` as Linux does. A best-effort task's weight follows.
pub fn setpriority(
    cur: &GuestSched,
    which: i32,
    niceval: i32,
) -> Result<GuestSched, GuestSchedError> {
    if !(PRIO_PROCESS..=PRIO_USER).contains(&which) {
        return Err(GuestSchedError::Which(which));
    }
    let nice = niceval.clamp(NICE_MIN.into(), NICE_MAX.into()) as i8;
    let mut next = *cur;
    next.nice = nice;
    if is_fair(cur.policy) {
        next.params = Params::BestEffort { nice };
    }
    Ok(next)
}

/// What `getpriority` returns for the guest (`20 - nice`, Linux's
/// `nice_to_rlimit`: always positive).
pub fn getpriority(cur: &GuestSched) -> i32 {
    20 - i32::from(cur.nice)
}

/// What `sched_getscheduler` returns.
pub fn getscheduler(cur: &GuestSched) -> i32 {
    cur.policy as i32
        | if cur.reset_on_fork {
            SCHED_RESET_ON_FORK
        } else {
            0
        }
}

/// What `sched_getparam` writes in `sched_priority`.
pub fn getparam(cur: &GuestSched) -> i32 {
    match cur.params {
        Params::Fixed { prio, .. } => prio.into(),
        _ => 0,
    }
}

/// What `sched_getattr(pid, attr, size, flags)` writes: `size` must be
/// in `SCHED_ATTR_SIZE_VER0..=4096` and `flags` 0; the bytes are
/// `min(size, SCHED_ATTR_SIZE_VER1)` long with that in their size field.
pub fn getattr(cur: &GuestSched, size: u32, flags: u32) -> Result<Vec<u8>, GuestSchedError> {
    if flags != 0 {
        return Err(GuestSchedError::CallFlags(flags));
    }
    if !(SCHED_ATTR_SIZE_VER0..=SCHED_ATTR_SIZE_MAX).contains(&(size as usize)) {
        return Err(GuestSchedError::GetSize(size));
    }
    Ok(encode_attr(&current_attr(cur), size as usize))
}

/// What `sched_get_priority_min`/`max` return for `policy`.
pub fn priority_range(policy: i32) -> Result<(i32, i32), GuestSchedError> {
    match u32::try_from(policy) {
        Ok(SCHED_FIFO | SCHED_RR) => Ok((1, PRIO_MAX.into())),
        Ok(SCHED_OTHER | SCHED_BATCH | SCHED_IDLE | SCHED_DEADLINE | SCHED_EXT) => Ok((0, 0)),
        _ => Err(GuestSchedError::Policy(policy.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::Rng;
    use super::*;

    const MS: u64 = 1_000_000;

    fn attr_bytes(a: &Attr, size: usize) -> Vec<u8> {
        let mut b = encode_attr(a, size);
        b.resize(size, 0);
        b[0..4].copy_from_slice(&(size as u32).to_ne_bytes());
        b
    }

    fn dl(runtime: u64, deadline: u64, period: u64) -> Attr {
        Attr {
            policy: SCHED_DEADLINE,
            runtime,
            deadline,
            period,
            ..Attr::default()
        }
    }

    #[test]
    fn setscheduler_every_policy_and_priority() {
        let cur = GuestSched {
            nice: 4,
            params: Params::BestEffort { nice: 4 },
            ..GuestSched::default()
        };
        for policy in -2..=9i32 {
            for prio in -1..=100i32 {
                let r = setscheduler(&cur, policy, prio);
                let p = policy as u32;
                let ok = match policy {
                    1 | 2 => (1..=99).contains(&prio),
                    0 | 3 | 5 | 7 => prio == 0,
                    _ => false, // <0, ISO, DEADLINE (needs sched_setattr), >7
                };
                assert_eq!(r.is_ok(), ok, "policy {policy} prio {prio}: {r:?}");
                let Ok(g) = r else {
                    assert_eq!(r.unwrap_err().errno(), libc::EINVAL);
                    continue;
                };
                assert_eq!(g.policy, p);
                assert_eq!(g.nice, 4, "nice survives");
                assert!(!g.reset_on_fork);
                let want = match p {
                    SCHED_FIFO => Params::Fixed {
                        prio: prio as u8,
                        quantum_ns: None,
                    },
                    SCHED_RR => Params::Fixed {
                        prio: prio as u8,
                        quantum_ns: Some(RR_TIMESLICE_NS),
                    },
                    SCHED_IDLE => Params::BestEffort { nice: 19 },
                    _ => Params::BestEffort { nice: 4 },
                };
                assert_eq!(g.params, want, "policy {policy} prio {prio}");
                assert_eq!(getscheduler(&g), policy);
                assert_eq!(getparam(&g), if is_rt(p) { prio } else { 0 });
            }
        }
        let g = setscheduler(&cur, SCHED_FIFO as i32 | SCHED_RESET_ON_FORK, 7).unwrap();
        assert!(g.reset_on_fork);
        assert_eq!(getscheduler(&g), 1 | SCHED_RESET_ON_FORK);
        assert_eq!(
            setscheduler(&cur, SCHED_RESET_ON_FORK | 4, 0),
            Err(GuestSchedError::Policy(4))
        );
        assert_eq!(
            setscheduler(&cur, i32::MIN, 0),
            Err(GuestSchedError::Policy(i32::MIN.into()))
        );
        assert!(setscheduler(&cur, i32::MAX, 0).is_err());
        assert_eq!(
            setscheduler(&cur, 1, -5),
            Err(GuestSchedError::Priority {
                policy: 1,
                priority: -5
            })
        );
    }

    #[test]
    fn setparam_keeps_the_policy() {
        let fifo = setscheduler(&GuestSched::default(), 1 | SCHED_RESET_ON_FORK, 10).unwrap();
        for prio in -1..=100 {
            let r = setparam(&fifo, prio);
            assert_eq!(r.is_ok(), (1..=99).contains(&prio), "prio {prio}");
            if let Ok(g) = r {
                assert_eq!(
                    g.params,
                    Params::Fixed {
                        prio: prio as u8,
                        quantum_ns: None
                    }
                );
                assert!(g.reset_on_fork, "setparam keeps reset-on-fork");
            }
        }
        let other = GuestSched::default();
        assert_eq!(setparam(&other, 0), Ok(other));
        assert!(setparam(&other, 1).is_err());
        let d = setattr(&other, &attr_bytes(&dl(MS, 10 * MS, 10 * MS), 48), 0).unwrap();
        assert!(matches!(setparam(&d, 0), Err(GuestSchedError::Deadline(_))));
    }

    #[test]
    fn setattr_deadline_fields() {
        let cur = GuestSched::default();
        let ok = |a: Attr| setattr(&cur, &attr_bytes(&a, 48), 0);
        let g = ok(dl(2 * MS, 5 * MS, 10 * MS)).unwrap();
        assert_eq!(
            g.params,
            Params::Edf {
                period_ns: 10 * MS,
                budget_ns: 2 * MS,
                deadline_ns: 5 * MS
            }
        );
        assert_eq!(g.policy, SCHED_DEADLINE);
        assert_eq!(getscheduler(&g), 6);
        // Period 0 means the deadline.
        assert_eq!(
            ok(dl(2 * MS, 5 * MS, 0)).unwrap().params,
            Params::Edf {
                period_ns: 5 * MS,
                budget_ns: 2 * MS,
                deadline_ns: 5 * MS
            }
        );
        // Each refusal of __checkparam_dl.
        for (a, why) in [
            (dl(MS, 0, 10 * MS), "deadline is zero"),
            (dl(1023, 5 * MS, 10 * MS), "runtime is below 1024 ns"),
            (dl(MS, 1 << 63, 0), "deadline or period has its top bit set"),
            (
                dl(MS, 5 * MS, 1 << 63),
                "deadline or period has its top bit set",
            ),
            (
                dl(MS, 5 * MS, 4 * MS),
                "period is shorter than the deadline",
            ),
            (
                dl(6 * MS, 5 * MS, 10 * MS),
                "deadline is shorter than the runtime",
            ),
            (
                dl(2_000, 50_000, 99_999),
                "period is outside 100 us ..= 2^22 us",
            ),
            (
                dl(MS, 5 * MS, DL_PERIOD_MAX_NS + 1),
                "period is outside 100 us ..= 2^22 us",
            ),
        ] {
            assert_eq!(ok(a), Err(GuestSchedError::Deadline(why)), "{a:?}");
        }
        // The edges that pass.
        assert!(ok(dl(1024, 1024, DL_PERIOD_MIN_NS)).is_ok());
        assert!(ok(dl(MS, DL_PERIOD_MAX_NS, DL_PERIOD_MAX_NS)).is_ok());
        // A deadline task with a priority is refused.
        assert!(matches!(
            ok(Attr {
                priority: 1,
                ..dl(MS, 5 * MS, 10 * MS)
            }),
            Err(GuestSchedError::Priority { .. })
        ));
    }

    #[test]
    fn setattr_size_field_and_buffer() {
        let cur = GuestSched::default();
        let a = Attr {
            policy: SCHED_FIFO,
            priority: 5,
            ..Attr::default()
        };
        // Every size from 0 to a page and a bit, with a zero tail.
        for size in 0..=4100u32 {
            let mut b = attr_bytes(&a, (size as usize).max(48));
            b[0..4].copy_from_slice(&size.to_ne_bytes());
            let r = setattr(&cur, &b, 0);
            let ok = size == 0 || (48..=4096).contains(&size);
            assert_eq!(r.is_ok(), ok, "size {size}: {r:?}");
            if !ok {
                assert_eq!(r, Err(GuestSchedError::Size(size)));
                assert_eq!(r.unwrap_err().errno(), libc::E2BIG);
            }
        }
        // A non-zero byte past what we know: E2BIG, with its offset.
        for at in [56, 57, 100, 4095] {
            let mut b = attr_bytes(&a, 4096);
            b[at] = 1;
            assert_eq!(setattr(&cur, &b, 0), Err(GuestSchedError::Tail(at)));
        }
        // Bytes past `size` are not the attr's: ignored.
        let mut b = attr_bytes(&a, 100);
        b[0..4].copy_from_slice(&56u32.to_ne_bytes());
        b[80] = 9;
        assert!(setattr(&cur, &b, 0).is_ok());
        // Fewer bytes than the size says (unreadable memory): EFAULT.
        for have in [0, 3, 4, 47] {
            let b = attr_bytes(&a, 48);
            let r = setattr(&cur, &b[..have], 0);
            assert!(
                matches!(r, Err(GuestSchedError::Short { .. })),
                "{have}: {r:?}"
            );
            assert_eq!(r.unwrap_err().errno(), libc::EFAULT);
        }
        // The call's flags argument.
        for flags in [1, 2, u32::MAX] {
            assert_eq!(
                setattr(&cur, &attr_bytes(&a, 48), flags),
                Err(GuestSchedError::CallFlags(flags))
            );
        }
        assert_eq!(attr_size(0), Ok(48));
        assert_eq!(attr_size(56), Ok(56));
        assert_eq!(attr_size(47), Err(GuestSchedError::Size(47)));
    }

    #[test]
    fn setattr_policy_priority_and_nice_fields() {
        let cur = GuestSched {
            nice: -3,
            ..GuestSched::default()
        };
        for policy in [0u32, 1, 2, 3, 4, 5, 6, 7, 8, 0x4000_0000, u32::MAX] {
            for priority in [0u32, 1, 50, 99, 100, u32::MAX] {
                let a = Attr {
                    policy,
                    priority,
                    nice: 7,
                    ..Attr::default()
                };
                let r = setattr(&cur, &attr_bytes(&a, 56), 0);
                let ok = match policy {
                    1 | 2 => (1..=99).contains(&priority),
                    0 | 3 | 5 | 7 => priority == 0,
                    _ => false, // ISO, DEADLINE without parameters, unknown
                };
                assert_eq!(r.is_ok(), ok, "policy {policy} priority {priority}: {r:?}");
                if let Ok(g) = r {
                    // Nice is set by fair policies only.
                    let nice = if is_fair(policy) { 7 } else { -3 };
                    assert_eq!(g.nice, nice, "policy {policy}");
                }
            }
        }
        // Nice is clamped, as Linux does.
        for (given, want) in [
            (-100, -20),
            (-21, -20),
            (-20, -20),
            (0, 0),
            (19, 19),
            (20, 19),
            (i32::MAX, 19),
            (i32::MIN, -20),
        ] {
            let a = Attr {
                nice: given,
                ..Attr::default()
            };
            let g = setattr(&cur, &attr_bytes(&a, 48), 0).unwrap();
            assert_eq!(g.params, Params::BestEffort { nice: want }, "nice {given}");
        }
    }

    #[test]
    fn setattr_flags() {
        let cur = GuestSched::default();
        let base = Attr {
            policy: SCHED_RR,
            priority: 3,
            ..Attr::default()
        };
        // Every single flag bit.
        for bit in 0..64 {
            let flag = 1u64 << bit;
            let a = Attr {
                flags: flag,
                util_min: 100,
                util_max: 200,
                ..base
            };
            let r = setattr(&cur, &attr_bytes(&a, 56), 0);
            if flag & SCHED_FLAG_ALL == 0 {
                assert_eq!(r, Err(GuestSchedError::Flags(flag)), "bit {bit}");
                continue;
            }
            if flag & (SCHED_FLAG_KEEP_POLICY | SCHED_FLAG_KEEP_PARAMS) != 0 {
                // From SCHED_OTHER: the kept policy refuses priority 3, the
                // kept parameters have priority 0, which SCHED_RR refuses.
                assert!(
                    matches!(r, Err(GuestSchedError::Priority { .. })),
                    "bit {bit}: {r:?}"
                );
                continue;
            }
            let g = r.unwrap_or_else(|e| panic!("bit {bit}: {e}"));
            assert_eq!(g.reset_on_fork, flag == SCHED_FLAG_RESET_ON_FORK);
            assert_eq!(g.reclaim, flag == SCHED_FLAG_RECLAIM);
            assert_eq!(g.dl_overrun, flag == SCHED_FLAG_DL_OVERRUN);
            assert_eq!(
                g.util_min,
                if flag == SCHED_FLAG_UTIL_CLAMP_MIN {
                    100
                } else {
                    0
                }
            );
            assert_eq!(
                g.util_max,
                if flag == SCHED_FLAG_UTIL_CLAMP_MAX {
                    200
                } else {
                    1024
                }
            );
        }
        // KEEP_POLICY: the policy field is ignored.
        let fifo = setscheduler(&cur, 1, 20).unwrap();
        let a = Attr {
            policy: SCHED_OTHER,
            priority: 30,
            flags: SCHED_FLAG_KEEP_POLICY,
            ..Attr::default()
        };
        let g = setattr(&fifo, &attr_bytes(&a, 48), 0).unwrap();
        assert_eq!(
            g.params,
            Params::Fixed {
                prio: 30,
                quantum_ns: None
            }
        );
        // KEEP_PARAMS: the parameters are the current ones.
        let a = Attr {
            policy: SCHED_RR,
            priority: 99,
            flags: SCHED_FLAG_KEEP_PARAMS,
            ..Attr::default()
        };
        let g = setattr(&fifo, &attr_bytes(&a, 48), 0).unwrap();
        assert_eq!(
            g.params,
            Params::Fixed {
                prio: 20,
                quantum_ns: Some(RR_TIMESLICE_NS)
            }
        );
        // KEEP_PARAMS from SCHED_OTHER to FIFO: priority 0, refused.
        assert!(setattr(&cur, &attr_bytes(&a, 48), 0).is_err());
    }

    #[test]
    fn setattr_utilisation_clamps() {
        let cur = GuestSched::default();
        let both = SCHED_FLAG_UTIL_CLAMP_MIN | SCHED_FLAG_UTIL_CLAMP_MAX;
        let with = |flags, util_min, util_max, size| {
            let a = Attr {
                flags,
                util_min,
                util_max,
                ..Attr::default()
            };
            setattr(&cur, &attr_bytes(&a, size), 0)
        };
        assert!(with(both, 0, 1024, 56).is_ok());
        assert!(with(both, 1024, 1024, 56).is_ok());
        assert!(matches!(
            with(both, 1025, 1024, 56),
            Err(GuestSchedError::Clamp { .. })
        ));
        assert!(matches!(
            with(both, 0, 1025, 56),
            Err(GuestSchedError::Clamp { .. })
        ));
        assert!(matches!(
            with(both, 600, 500, 56),
            Err(GuestSchedError::Clamp { .. })
        ));
        // -1 resets to the defaults.
        let g = with(both, u32::MAX, u32::MAX, 56).unwrap();
        assert_eq!((g.util_min, g.util_max), (0, 1024));
        // Clamps need the second version of the struct.
        assert_eq!(
            with(SCHED_FLAG_UTIL_CLAMP_MIN, 1, 2, 48),
            Err(GuestSchedError::ClampSize)
        );
        // Values without their flag are ignored.
        let g = with(0, 5000, 5000, 56).unwrap();
        assert_eq!((g.util_min, g.util_max), (0, 1024));
        // A min above the current max.
        let capped = with(SCHED_FLAG_UTIL_CLAMP_MAX, 0, 300, 56).unwrap();
        let a = Attr {
            flags: SCHED_FLAG_UTIL_CLAMP_MIN,
            util_min: 400,
            ..Attr::default()
        };
        assert!(matches!(
            setattr(&capped, &attr_bytes(&a, 56), 0),
            Err(GuestSchedError::Clamp { .. })
        ));
    }

    #[test]
    fn getattr_round_trips() {
        let cur = GuestSched::default();
        let mut rng = Rng::new(5);
        for _ in 0..2_000 {
            let policy = [0, 1, 2, 3, 5, 6, 7][rng.range(0, 6) as usize];
            let a = match policy {
                SCHED_DEADLINE => {
                    let period = rng.range(DL_PERIOD_MIN_NS, DL_PERIOD_MAX_NS);
                    let deadline = rng.range(1024, period);
                    dl(rng.range(1024, deadline), deadline, period)
                }
                SCHED_FIFO | SCHED_RR => Attr {
                    policy,
                    priority: rng.range(1, 99) as u32,
                    ..Attr::default()
                },
                _ => Attr {
                    policy,
                    nice: rng.range(0, 39) as i32 - 20,
                    ..Attr::default()
                },
            };
            let a = Attr {
                flags: rng.next_u64()
                    & (SCHED_FLAG_RESET_ON_FORK | SCHED_FLAG_RECLAIM | SCHED_FLAG_DL_OVERRUN),
                ..a
            };
            let g = setattr(&cur, &attr_bytes(&a, 56), 0).unwrap_or_else(|e| panic!("{a:?}: {e}"));
            let back = getattr(&g, 56, 0).unwrap();
            let again = setattr(&cur, &back, 0).unwrap();
            assert_eq!(again, g, "{a:?}");
            // A short sched_getattr buffer gets the first version.
            assert_eq!(getattr(&g, 48, 0).unwrap().len(), 48);
            assert_eq!(getattr(&g, 4096, 0).unwrap().len(), 56);
        }
        assert_eq!(getattr(&cur, 47, 0), Err(GuestSchedError::GetSize(47)));
        assert_eq!(getattr(&cur, 4097, 0), Err(GuestSchedError::GetSize(4097)));
        assert_eq!(getattr(&cur, 56, 1), Err(GuestSchedError::CallFlags(1)));
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = Rng::new(99);
        let cur = GuestSched::default();
        let mut accepted = 0;
        for i in 0..20_000 {
            let len = rng.range(0, 128) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if i % 2 == 0 && len >= 4 {
                // Plausible sizes, to get past the first check.
                let size = [0u32, 48, 56, 64][rng.range(0, 3) as usize];
                b[0..4].copy_from_slice(&size.to_ne_bytes());
            }
            if setattr(&cur, &b, 0).is_ok() {
                accepted += 1;
            }
            let _ = setscheduler(&cur, rng.next_u64() as i32, rng.next_u64() as i32);
            let _ = setparam(&cur, rng.next_u64() as i32);
            let _ = setpriority(&cur, rng.next_u64() as i32 % 4, rng.next_u64() as i32);
        }
        // Random bytes are nearly always refused.
        assert!(accepted < 100, "{accepted} garbage attrs accepted");
    }

    #[test]
    fn nice_and_priority_range() {
        let cur = GuestSched::default();
        for which in -1..=3 {
            assert_eq!(
                setpriority(&cur, which, 0).is_ok(),
                (0..=2).contains(&which)
            );
        }
        for (given, want) in [(-50, -20), (-20, -20), (5, 5), (19, 19), (40, 19)] {
            let g = setpriority(&cur, 0, given).unwrap();
            assert_eq!(g.nice, want);
            assert_eq!(g.params, Params::BestEffort { nice: want });
            assert_eq!(getpriority(&g), 20 - i32::from(want));
        }
        // While real-time, nice is remembered, and used on the way back.
        let fifo = setscheduler(&cur, 1, 5).unwrap();
        let fifo = setpriority(&fifo, 0, 10).unwrap();
        assert_eq!(
            fifo.params,
            Params::Fixed {
                prio: 5,
                quantum_ns: None
            }
        );
        assert_eq!(
            setscheduler(&fifo, 0, 0).unwrap().params,
            Params::BestEffort { nice: 10 }
        );
        for policy in -1..=8 {
            let r = priority_range(policy);
            match policy {
                1 | 2 => assert_eq!(r, Ok((1, 99))),
                0 | 3 | 5 | 6 | 7 => assert_eq!(r, Ok((0, 0))),
                _ => assert!(r.is_err()),
            }
        }
    }
}
