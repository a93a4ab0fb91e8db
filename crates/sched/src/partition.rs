//! Partitioned multiprocessor scheduling: which of a system's CPUs each
//! guest runs on.
//!
//! The executive dispatches several CPUs by giving every guest one CPU and
//! running one uniprocessor policy per CPU (partitioned EDF / fixed
//! priority / round robin), rather than one global queue: a guest never
//! migrates, so a switch stays one freeze and one thaw on one CPU, and
//! each CPU's admission is the uniprocessor test the EDF core already
//! makes (Σ C/D ≤ bound). The price is the classic one of partitioning: a
//! set whose total density fits the machine may not fit any partition
//! (bin packing), refused here with the guest that did not fit.
//!
//! The assignment: reservations (EDF) first, densest first, each on the
//! CPU with the least density so far where it fits (worst fit: it spreads
//! reservations, leaving room on every CPU for the guests that follow);
//! then the other guests (fixed priority, round robin, best effort), in
//! their order, each on the CPU with the fewest guests (ties: the least
//! reserved). Deterministic; pure.

use super::Params;

/// Why a set of guests could not be partitioned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// No CPU was given.
    #[error("no CPU to dispatch on")]
    NoCpu,
    /// Guest `guest`'s reservation (`density_ppb`) fits on no CPU: the
    /// most room left on any is `room_ppb`.
    #[error(
        "guest {guest}'s reservation ({} % of a CPU) fits on no CPU (at most {} % left on one)",
        *density_ppb as f64 / 1e7,
        *room_ppb as f64 / 1e7
    )]
    NoRoom {
        guest: usize,
        density_ppb: u64,
        room_ppb: u64,
    },
}

/// EDF's admission measure, `budget / deadline` in parts per billion
/// (rounded up, as the EDF core rounds); 0 for the other kinds.
pub fn density_ppb(p: &Params) -> u64 {
    match *p {
        Params::Edf {
            budget_ns,
            deadline_ns,
            ..
        } if deadline_ns > 0 => super::edf::density_ppb(budget_ns, deadline_ns),
        _ => 0,
    }
}

/// The CPU index (into the system's CPU list, `0..cpus`) of each guest;
/// `bound_ppb` is each CPU's EDF admission bound.
pub fn partition(
    params: &[Params],
    cpus: usize,
    bound_ppb: u64,
) -> Result<Vec<usize>, PartitionError> {
    if cpus == 0 {
        return Err(PartitionError::NoCpu);
    }
    let mut used = vec![0u64; cpus];
    let mut count = vec![0usize; cpus];
    let mut at = vec![usize::MAX; params.len()];
    let mut reserved: Vec<(usize, u64)> = params
        .iter()
        .enumerate()
        .map(|(i, p)| (i, density_ppb(p)))
        .filter(|&(_, d)| d > 0)
        .collect();
    // densest first; equal densities in guest order
    reserved.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (i, d) in reserved {
        let best = (0..cpus)
            .filter(|&c| used[c] + d <= bound_ppb)
            .min_by_key(|&c| (used[c], c));
        let Some(c) = best else {
            return Err(PartitionError::NoRoom {
                guest: i,
                density_ppb: d,
                room_ppb: used
                    .iter()
                    .map(|u| bound_ppb.saturating_sub(*u))
                    .max()
                    .unwrap_or(0),
            });
        };
        used[c] += d;
        count[c] += 1;
        at[i] = c;
    }
    for slot in at.iter_mut() {
        if *slot != usize::MAX {
            continue;
        }
        let c = (0..cpus)
            .min_by_key(|&c| (count[c], used[c], c))
            .unwrap_or(0);
        count[c] += 1;
        *slot = c;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PPB;

    const MS: u64 = 1_000_000;

    fn edf(budget: u64, period: u64) -> Params {
        Params::Edf {
            period_ns: period * MS,
            budget_ns: budget * MS,
            deadline_ns: period * MS,
        }
    }

    const BE: Params = Params::BestEffort { nice: 0 };

    #[test]
    fn one_cpu_takes_everything_that_fits_and_refuses_the_rest() {
        let p = [
            edf(5, 10),
            BE,
            edf(4, 10),
            Params::Fixed {
                prio: 3,
                quantum_ns: None,
            },
        ];
        assert_eq!(partition(&p, 1, PPB), Ok(vec![0; 4]));
        let p = [edf(6, 10), edf(5, 10)];
        assert_eq!(
            partition(&p, 1, PPB),
            Err(PartitionError::NoRoom {
                guest: 1,
                density_ppb: PPB / 2,
                room_ppb: 4 * PPB / 10
            })
        );
        assert_eq!(partition(&p, 0, PPB), Err(PartitionError::NoCpu));
        assert_eq!(partition(&[], 2, PPB), Ok(vec![]));
    }

    #[test]
    fn reservations_spread_densest_first_then_the_rest_balance_counts() {
        // 0.6 and 0.5 cannot share; 0.3 goes where there is more room
        let p = [edf(3, 10), edf(6, 10), BE, edf(5, 10), BE, BE];
        let at = partition(&p, 2, PPB).unwrap();
        assert_ne!(at[1], at[3], "0.6 and 0.5 on one CPU: {at:?}");
        assert_eq!(at[0], at[3], "0.3 beside 0.5 (more room): {at:?}");
        // three reserved guests: CPU of 0.6 has 1, the other 2; the best
        // effort guests fill the first up first
        let on = |c: usize| at.iter().filter(|&&x| x == c).count();
        assert_eq!((on(0), on(1)), (3, 3), "{at:?}");
    }

    /// Bin packing's price, shown: 3 × 0.6 fits 2 CPUs by total (1.8 of
    /// 2.0) but on no partition.
    #[test]
    fn a_set_that_fits_by_total_may_not_fit_partitioned() {
        let p = [edf(6, 10), edf(6, 10), edf(6, 10)];
        assert!(matches!(
            partition(&p, 2, PPB),
            Err(PartitionError::NoRoom { guest: 2, .. })
        ));
        assert_eq!(partition(&p, 3, PPB), Ok(vec![0, 1, 2]));
    }

    /// Every CPU count from 1 to 8 with 0..=12 best-effort guests: each on
    /// a CPU in range, counts within one of each other.
    #[test]
    fn best_effort_guests_balance_on_every_cpu_count() {
        for cpus in 1..=8 {
            for n in 0..=12 {
                let at = partition(&vec![BE; n], cpus, PPB).unwrap();
                assert!(at.iter().all(|&c| c < cpus));
                let counts: Vec<usize> = (0..cpus)
                    .map(|c| at.iter().filter(|&&x| x == c).count())
                    .collect();
                let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                assert!(hi - lo <= 1, "{cpus} cpus, {n} guests: {counts:?}");
            }
        }
    }

    /// Random feasible-per-CPU sets: every reservation placed respects
    /// each CPU's bound.
    #[test]
    fn no_cpu_is_ever_over_its_bound() {
        let mut rng = super::super::sim::Rng::new(7);
        for _ in 0..500 {
            let cpus = rng.range(1, 4) as usize;
            let n = rng.range(0, 9) as usize;
            let p: Vec<Params> = (0..n)
                .map(|_| {
                    let period = rng.range(1, 20);
                    edf(rng.range(1, period), period)
                })
                .collect();
            if let Ok(at) = partition(&p, cpus, PPB) {
                for c in 0..cpus {
                    let sum: u64 = (0..n)
                        .filter(|&i| at[i] == c)
                        .map(|i| density_ppb(&p[i]))
                        .sum();
                    assert!(sum <= PPB, "cpu {c}: {sum}");
                }
            }
        }
    }
}
