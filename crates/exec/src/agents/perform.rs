//! `--perform NAME`: the executive makes the call on the guest's behalf,
//! unchanged, and the guest gets its result. It exists for Table 1 (the
//! paper's "interposition of getppid": the executive performs the call),
//! and as the simplest agent that exercises a path's `perform`. Which
//! calls a path can perform is the path's business (others fail with
//! ENOSYS, said in the trace).

use super::{parse_call, SpecError, Why};
use crate::agent::{Agent, Call, Decision, Guest, Perform as Act};
use crate::sysno::Sysno;

/// Performs the calls it holds.
#[derive(Debug, Default)]
pub struct Perform {
    calls: Vec<Sysno>,
}

impl Perform {
    /// Adds one `NAME` spec.
    pub fn add(&mut self, spec: &str) -> Result<(), SpecError> {
        let nr = parse_call(spec.trim()).map_err(|w| SpecError::new("perform", spec, w))?;
        if self.calls.contains(&nr) {
            return Err(SpecError::new(
                "perform",
                spec,
                Why::Repeated(nr.name().into_owned()),
            ));
        }
        self.calls.push(nr);
        self.calls.sort();
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

impl Agent for Perform {
    fn name(&self) -> &str {
        "perform"
    }
    fn wants(&self) -> Vec<Sysno> {
        self.calls.clone()
    }
    fn before(&mut self, call: &Call, _: &mut dyn Guest) -> Decision {
        if self.calls.binary_search(&call.nr).is_err() {
            return Decision::Continue;
        }
        Decision::Perform(Act {
            nr: call.nr,
            args: call.args,
            path: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;

    #[test]
    fn performs_the_call_unchanged() {
        let mut p = Perform::default();
        p.add("getppid").unwrap();
        let nr = Sysno::from_name("getppid").unwrap();
        let c = Call {
            tid: 3,
            nr,
            args: [1, 2, 3, 4, 5, 6],
            ip: 9,
            received_ns: 0,
            start_ns: 0,
        };
        let mut g = FakeGuest::default();
        assert_eq!(
            p.before(&c, &mut g),
            Decision::Perform(Act {
                nr,
                args: [1, 2, 3, 4, 5, 6],
                path: None
            })
        );
        let other = Call {
            nr: Sysno::from_name("getpid").unwrap(),
            ..c
        };
        assert_eq!(p.before(&other, &mut g), Decision::Continue);
        assert_eq!(p.wants(), vec![nr]);
    }

    #[test]
    fn bad_specs_say_why() {
        let mut p = Perform::default();
        assert!(p
            .add("getpppid")
            .unwrap_err()
            .to_string()
            .contains("getppid"));
        p.add("getppid").unwrap();
        assert!(matches!(
            p.add("getppid").unwrap_err().why,
            Why::Repeated(_)
        ));
        assert!(p.add("").is_err());
    }
}
