//! What the bench asks of the model: the two designs, a speedup over one
//! CPU, and the handoff fitted to a measured 2-CPU speedup.

use serde::{Deserialize, Serialize};

use crate::sim::{simulate, Call, Dist, LockRef, ModelError, Outcome, Segment, Workload};

impl Call {
    /// The giant design: the transport (trap, wake-up, answer) outside any
    /// lock, then everything the executive does under the one lock.
    pub fn giant(transport: Dist, hold: Dist) -> Call {
        Call {
            segments: vec![
                Segment {
                    lock: None,
                    time: transport,
                },
                Segment {
                    lock: Some(LockRef::Giant),
                    time: hold,
                },
            ],
        }
    }

    /// The fine design: the transport, the CPU's run-queue lock, then each
    /// shared lock the call takes, in lock order.
    pub fn fine(transport: Dist, runqueue: Dist, shared: &[(u16, Dist)]) -> Call {
        let mut segments = vec![
            Segment {
                lock: None,
                time: transport,
            },
            Segment {
                lock: Some(LockRef::CpuLocal),
                time: runqueue,
            },
        ];
        segments.extend(shared.iter().map(|(id, d)| Segment {
            lock: Some(LockRef::Shared(*id)),
            time: d.clone(),
        }));
        Call { segments }
    }
}

/// The same guests on one CPU and on the workload's CPUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Speedup {
    pub one: Outcome,
    pub many: Outcome,
    /// one.makespan / many.makespan.
    pub speedup: f64,
}

/// Runs `w`, and the same guests all on one CPU, and compares them.
pub fn speedup(w: &Workload) -> Result<Speedup, ModelError> {
    let one = simulate(&Workload {
        cpus: 1,
        guests_per_cpu: w.guests_per_cpu * w.cpus,
        ..w.clone()
    })?;
    let many = simulate(w)?;
    let speedup = one.makespan_ns as f64 / many.makespan_ns.max(1) as f64;
    Ok(Speedup { one, many, speedup })
}

/// The handoff (ns) at which the model's 2-CPU speedup of `w` equals
/// `target` (a measurement), searched in `0..=hi`. More handoff never
/// helps, so the search bisects; the seed is fixed, so it is exact for
/// that seed.
pub fn fit_handoff(w: &Workload, target: f64, hi: u64) -> Result<u64, ModelError> {
    let at = |h: u64| -> Result<f64, ModelError> {
        Ok(speedup(&Workload {
            cpus: 2,
            handoff_ns: h,
            ..w.clone()
        })?
        .speedup)
    };
    if !(target.is_finite() && target > 0.0) || at(0)? < target - 1e-9 || at(hi)? > target + 1e-9 {
        return Err(ModelError::NoFit { target, hi });
    }
    let (mut lo, mut hi) = (0u64, hi);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if at(mid)? >= target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}
