//! `--delay NAME=DURATION`: each call NAME is held for DURATION before it
//! goes on (a slow device, a slow server, a scheduling test).
//!
//! The agent answers [`Decision::Delay`]; agent.rs says the executive
//! holds the call that long, "then decide\[s\] again": it asks the whole
//! chain once more with the same call. The agent must then let it through
//! (and the agents after it decide as they would have). So it remembers,
//! per thread, the one call it is holding (a thread has one call pending
//! at a time): the second ask of the same call (same nr, arguments and ip)
//! continues and forgets it; any other call of that thread is a new call
//! and is delayed. State is bounded by the number of guest threads.
//!
//! `after` with a `Delay` decision is not the end of the call and changes
//! nothing (if it cleared the memory, the re-ask would be delayed again,
//! forever). Any other `after` of the thread clears its entry.
//!
//! Known gap: if a held call vanishes (the guest was killed or a signal
//! interrupted it) and the executive never re-asks, and the same thread
//! then makes the identical call again, that call is not delayed. A delay
//! is a test knob, not a security decision, so one lost delay is harmless.
//!
//! DURATION is an integer with a unit: `ns`, `us` (or `µs`), `ms`, `s`;
//! zero is refused (it would be a no-op that looks like a delay), and so
//! is anything over one hour (a hold that long is a typo, and it would
//! make a guest look hung).

use super::{parse_call, SpecError, Why};
use crate::agent::{Agent, Call, Decision, Guest, Outcome, Times};
use crate::sysno::Sysno;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The longest delay accepted.
pub const MAX_DELAY: Duration = Duration::from_secs(3600);

/// Holds the calls it knows for their duration, once per call.
#[derive(Debug, Default)]
pub struct Delay {
    rules: BTreeMap<Sysno, Duration>,
    /// tid → the call being held.
    holding: HashMap<u32, (Sysno, [u64; 6], u64)>,
}

impl Delay {
    /// Adds one `NAME=DURATION` spec.
    pub fn add(&mut self, spec: &str) -> Result<(), SpecError> {
        let err = |why| SpecError::new("delay", spec, why);
        let (name, d) = spec
            .split_once('=')
            .ok_or_else(|| err(Why::Syntax("NAME=DURATION, e.g. openat=10ms")))?;
        let nr = parse_call(name.trim()).map_err(err)?;
        let d = parse_duration(d.trim()).map_err(|w| err(Why::BadDuration(w)))?;
        if self.rules.insert(nr, d).is_some() {
            return Err(err(Why::Repeated(nr.name().into_owned())));
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// How many threads have a call held (tests, `exec status`).
    pub fn holding(&self) -> usize {
        self.holding.len()
    }
}

/// Parses a delay in mantle's one grammar (`10ms`, `2s`, `500us`,
/// `750ns`; [`mantle_units`]): more than zero, at most [`MAX_DELAY`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = mantle_units::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("a delay of zero delays nothing".into());
    }
    if d > MAX_DELAY {
        return Err(format!(
            "{s} is longer than the limit of {}s",
            MAX_DELAY.as_secs()
        ));
    }
    Ok(d)
}

impl Agent for Delay {
    fn name(&self) -> &str {
        "delay"
    }
    fn wants(&self) -> Vec<Sysno> {
        self.rules.keys().copied().collect()
    }
    fn before(&mut self, call: &Call, _: &mut dyn Guest) -> Decision {
        let Some(&d) = self.rules.get(&call.nr) else {
            return Decision::Continue;
        };
        let key = (call.nr, call.args, call.ip);
        if self.holding.get(&call.tid) == Some(&key) {
            // the executive asks again after the hold: let it through
            self.holding.remove(&call.tid);
            return Decision::Continue;
        }
        self.holding.insert(call.tid, key);
        Decision::Delay(d)
    }
    fn after(&mut self, call: &Call, d: &Decision, _: Outcome, _: Times) {
        if !matches!(d, Decision::Delay(_)) {
            self.holding.remove(&call.tid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;

    fn call(tid: u32, n: &str, a0: u64) -> Call {
        Call {
            tid,
            nr: Sysno::from_name(n).unwrap(),
            args: [a0, 0, 0, 0, 0, 0],
            ip: 0x400000,
            received_ns: 0,
            start_ns: 0,
        }
    }

    #[test]
    fn durations_at_unit_boundaries() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("1ns"), Duration::from_nanos(1));
        assert_eq!(ok("999ns"), Duration::from_nanos(999));
        assert_eq!(ok("1000ns"), ok("1us"));
        assert_eq!(ok("1us"), Duration::from_micros(1));
        assert_eq!(ok("1µs"), Duration::from_micros(1));
        assert_eq!(ok("500us"), Duration::from_micros(500));
        assert_eq!(ok("1000us"), ok("1ms"));
        assert_eq!(ok("10ms"), Duration::from_millis(10));
        assert_eq!(ok("1000ms"), ok("1s"));
        assert_eq!(ok("2s"), Duration::from_secs(2));
        assert_eq!(ok("3600s"), MAX_DELAY);
        assert_eq!(ok("3600000ms"), MAX_DELAY);
        assert_eq!(ok("3600000000us"), MAX_DELAY);
        assert_eq!(ok("3600000000000ns"), MAX_DELAY);
        assert_eq!(ok("0010ms"), Duration::from_millis(10));
        // the one grammar's minutes and hours, and its sums
        assert_eq!(ok("10m"), Duration::from_secs(600));
        assert_eq!(ok("1h"), MAX_DELAY);
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1.5ms"), Duration::from_micros(1500));
        for bad in [
            "0ns",
            "0s",
            "0ms",
            "3601s",
            "3600001ms",
            "3600000001us",
            "3600000000001ns",
            "18446744073709551615s",  // u64::MAX s: overflows in ns
            "18446744073709551616ns", // past u64
            "18446744073709551615ns", // fits u64, over the limit
            "10",
            "ms",
            "",
            "-1ms",
            "10MS",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn delays_once_then_lets_the_re_ask_through() {
        let mut d = Delay::default();
        d.add("openat=10ms").unwrap();
        let mut g = FakeGuest::default();
        let c = call(5, "openat", 1);
        let ms10 = Decision::Delay(Duration::from_millis(10));
        assert_eq!(d.before(&c, &mut g), ms10);
        assert_eq!(d.holding(), 1);
        // the executive may say the call was held; that is not its end
        d.after(&c, &ms10, Outcome::Unseen, Times::default());
        assert_eq!(d.before(&c, &mut g), Decision::Continue);
        assert_eq!(d.holding(), 0);
        d.after(&c, &Decision::Continue, Outcome::Unseen, Times::default());
        // the next call, even identical, is a new call: delayed again
        assert_eq!(d.before(&c, &mut g), ms10);
        assert_eq!(d.before(&c, &mut g), Decision::Continue);
        // other calls are not this agent's
        assert_eq!(d.before(&call(5, "read", 1), &mut g), Decision::Continue);
    }

    #[test]
    fn threads_are_held_independently_and_a_new_call_replaces_a_vanished_one() {
        let mut d = Delay::default();
        d.add("openat=1s").unwrap();
        let mut g = FakeGuest::default();
        let s1 = Decision::Delay(Duration::from_secs(1));
        assert_eq!(d.before(&call(1, "openat", 1), &mut g), s1);
        assert_eq!(d.before(&call(2, "openat", 1), &mut g), s1);
        assert_eq!(d.holding(), 2);
        // thread 1's call vanished; its next call differs: delayed
        assert_eq!(d.before(&call(1, "openat", 2), &mut g), s1);
        assert_eq!(d.holding(), 2);
        assert_eq!(d.before(&call(2, "openat", 1), &mut g), Decision::Continue);
        assert_eq!(d.before(&call(1, "openat", 2), &mut g), Decision::Continue);
        assert_eq!(d.holding(), 0);
    }

    #[test]
    fn an_ended_call_clears_the_hold() {
        let mut d = Delay::default();
        d.add("getppid=1ms").unwrap();
        let mut g = FakeGuest::default();
        let c = call(9, "getppid", 0);
        assert!(matches!(d.before(&c, &mut g), Decision::Delay(_)));
        // ended some other way (another agent failed it on the re-ask)
        d.after(
            &c,
            &Decision::Fail(1),
            Outcome::Result(-1),
            Times::default(),
        );
        assert_eq!(d.holding(), 0);
        assert!(matches!(d.before(&c, &mut g), Decision::Delay(_)));
    }

    #[test]
    fn bad_specs_say_why() {
        let mut d = Delay::default();
        assert!(matches!(d.add("openat").unwrap_err().why, Why::Syntax(_)));
        assert!(matches!(
            d.add("openat=0ms").unwrap_err().why,
            Why::BadDuration(_)
        ));
        assert!(matches!(
            d.add("opnat=1ms").unwrap_err().why,
            Why::UnknownCall { .. }
        ));
        d.add("openat=1ms").unwrap();
        assert!(matches!(
            d.add("openat=2ms").unwrap_err().why,
            Why::Repeated(_)
        ));
    }
}
