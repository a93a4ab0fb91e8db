//! The deadlock guard (mTags section 5.3): a process takes a deadlock tag
//! as the origin of its synchronous call chains, and the kernel side's
//! reports of circles on that tag are collected until a limit is reached.
//! The chain in each report is rebuilt from the lifeline by [`Tags`]
//! (pure part: [`crate::deadlock`]). A tag the guard created is deleted
//! when it ends, whatever way it ends; a tag it was given stays.
//!
//! No output and no signal handling here: the caller says how reports are
//! shown and when to stop early.

use crate::abi::OpCode;
use crate::deadlock::DeadlockReport;
use crate::{CreateOpts, Error, Tags, Target};
use std::time::{Duration, Instant};

/// Records of the lifeline of a tag the guard creates: enough to rebuild
/// the chains of a process's call graph; all tags share one ring.
const LIFELINE: u32 = 1024;

/// The name of the tag a guard of `target` creates when it is given none.
pub fn default_name(target: Target) -> String {
    let id = match target {
        Target::Pid(p) | Target::Tid(p) => p,
    };
    format!("deadlock.{id}")
}

/// When a guard stops on its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// After this many reports.
    pub count: Option<u64>,
    /// At this instant.
    pub until: Option<Instant>,
}

impl Limits {
    /// Limits starting now: `count` reports, `timeout_ms` milliseconds.
    pub fn new(count: Option<u64>, timeout_ms: Option<u32>) -> Limits {
        Limits {
            count,
            until: timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms as u64)),
        }
    }

    /// Whether a guard that has seen `seen` reports stops at `now`.
    pub fn reached(&self, seen: u64, now: Instant) -> bool {
        self.count.is_some_and(|c| seen >= c) || self.until.is_some_and(|u| now >= u)
    }
}

/// A guard in place: the target holds the deadlock tag.
pub struct Guard<'a> {
    tags: &'a Tags,
    name: String,
    /// The guard created the tag, and deletes it when dropped.
    made: bool,
}

impl<'a> Guard<'a> {
    /// Gives `target` the deadlock tag `name` (which must be a deadlock
    /// tag), or a new one named by [`default_name`]. Root. On failure no
    /// tag of the guard's is left behind.
    pub fn start(tags: &'a Tags, target: Target, name: Option<&str>) -> Result<Guard<'a>, Error> {
        let guard = match name {
            Some(n) => {
                if !tags.info(tags.lookup(n)?)?.deadlock {
                    return Err(Error::Invalid(format!(
                        "tag {n:?} is not a deadlock tag (create it with --deadlock)"
                    )));
                }
                Guard {
                    tags,
                    name: n.to_string(),
                    made: false,
                }
            }
            None => {
                let n = default_name(target);
                let o = CreateOpts {
                    lifeline: LIFELINE,
                    deadlock: true,
                    ..Default::default()
                };
                tags.create(&n, &o)?;
                Guard {
                    tags,
                    name: n,
                    made: true,
                }
            }
        };
        // On error the guard is dropped here, which deletes a tag it made.
        tags.op(OpCode::Set, Some(&guard.name), 0, target)?;
        Ok(guard)
    }

    /// The deadlock tag in use.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Hands each report on this guard's tag to `report` until `limits`
    /// are reached or `stop` says so (it is asked at least every 200 ms),
    /// then ends the guard. Returns how many reports there were.
    pub fn watch(
        self,
        limits: Limits,
        stop: impl Fn() -> bool,
        mut report: impl FnMut(&DeadlockReport),
    ) -> Result<u64, Error> {
        let mut seen = 0u64;
        self.tags.watch_deadlocks(|rep| {
            if let Some(rep) = rep.filter(|r| r.tag == self.name) {
                seen += 1;
                report(&rep);
            }
            !stop() && !limits.reached(seen, Instant::now())
        })?;
        Ok(seen)
        // self drops here: a tag the guard made is deleted before the
        // caller hears the result.
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.made {
            // Best effort: the tag disappears at `tags down` in any case.
            let _ = self.tags.delete(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_name_is_the_target_number() {
        assert_eq!(default_name(Target::Pid(1234)), "deadlock.1234");
        assert_eq!(default_name(Target::Tid(77)), "deadlock.77");
    }

    #[test]
    fn limits() {
        let now = Instant::now();
        let none = Limits::default();
        assert!(!none.reached(u64::MAX, now));
        let two = Limits {
            count: Some(2),
            until: None,
        };
        assert!(!two.reached(0, now));
        assert!(!two.reached(1, now));
        assert!(two.reached(2, now));
        let zero = Limits {
            count: Some(0),
            until: None,
        };
        assert!(zero.reached(0, now));
        let timed = Limits {
            count: None,
            until: Some(now + Duration::from_secs(1)),
        };
        assert!(!timed.reached(5, now));
        assert!(timed.reached(0, now + Duration::from_secs(1)));
        assert!(Limits::new(None, Some(0)).reached(0, Instant::now()));
        assert!(!Limits::new(None, Some(60_000)).reached(0, Instant::now()));
    }
}
