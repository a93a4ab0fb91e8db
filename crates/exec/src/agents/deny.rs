//! `--deny NAME[=ERRNO]`: the call fails with ERRNO (default EPERM)
//! without being made. One agent holds every `--deny` of a guest (a map
//! from call to errno), so that the chain stays short and a call named
//! twice is caught at parse time.
//!
//! No guest memory is read: the decision rests on the call number alone,
//! which the guest cannot change after the check, so there is no TOCTOU.

use super::{errno, parse_call, SpecError, Why};
use crate::agent::{Agent, Call, Decision, Guest};
use crate::sysno::Sysno;
use std::collections::BTreeMap;

/// Fails the calls it holds with their errno.
#[derive(Debug, Default)]
pub struct Deny {
    rules: BTreeMap<Sysno, i32>,
}

impl Deny {
    /// Adds one `NAME[=ERRNO]` spec.
    pub fn add(&mut self, spec: &str) -> Result<(), SpecError> {
        let err = |why| SpecError::new("deny", spec, why);
        let (name, e) = match spec.split_once('=') {
            Some((n, e)) => (n, Some(e)),
            None => (spec, None),
        };
        let nr = parse_call(name.trim()).map_err(err)?;
        let e = match e {
            None => libc::EPERM,
            Some(e) => errno::parse(e.trim()).ok_or_else(|| err(Why::BadErrno(e.to_string())))?,
        };
        if self.rules.insert(nr, e).is_some() {
            return Err(err(Why::Repeated(nr.name().into_owned())));
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The errno `nr` fails with, if denied.
    pub fn errno_of(&self, nr: Sysno) -> Option<i32> {
        self.rules.get(&nr).copied()
    }
}

impl Agent for Deny {
    fn name(&self) -> &str {
        "deny"
    }
    fn wants(&self) -> Vec<Sysno> {
        self.rules.keys().copied().collect()
    }
    fn before(&mut self, call: &Call, _: &mut dyn Guest) -> Decision {
        match self.rules.get(&call.nr) {
            Some(&e) => Decision::Fail(e),
            None => Decision::Continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;

    fn nr(n: &str) -> Sysno {
        Sysno::from_name(n).unwrap()
    }

    fn call(n: &str) -> Call {
        Call {
            tid: 7,
            nr: nr(n),
            args: [0; 6],
            ip: 0,
            received_ns: 0,
            start_ns: 0,
        }
    }

    #[test]
    fn denies_with_the_given_errno_or_eperm() {
        let mut d = Deny::default();
        d.add("openat=EACCES").unwrap();
        d.add("getppid").unwrap();
        d.add("unlink=2").unwrap();
        d.add(" mkdir = erofs ").unwrap();
        let mut g = FakeGuest::default();
        assert_eq!(d.before(&call("openat"), &mut g), Decision::Fail(13));
        assert_eq!(d.before(&call("getppid"), &mut g), Decision::Fail(1));
        assert_eq!(d.before(&call("unlink"), &mut g), Decision::Fail(2));
        assert_eq!(d.before(&call("mkdir"), &mut g), Decision::Fail(30));
        assert_eq!(d.before(&call("read"), &mut g), Decision::Continue);
        let mut w = vec![nr("openat"), nr("getppid"), nr("unlink"), nr("mkdir")];
        w.sort();
        assert_eq!(d.wants(), w);
    }

    #[test]
    fn every_errno_name_is_accepted() {
        for (name, e) in errno::all_names() {
            let mut d = Deny::default();
            d.add(&format!("openat={name}")).unwrap();
            assert_eq!(d.errno_of(nr("openat")), Some(e), "{name}");
        }
    }

    #[test]
    fn bad_specs_say_why() {
        let mut d = Deny::default();
        let e = d.add("opnat=EACCES").unwrap_err();
        assert_eq!(e.option, "deny");
        assert!(e.to_string().contains("openat"), "{e}");
        let e = d.add("openat=EFOO").unwrap_err();
        assert!(matches!(e.why, Why::BadErrno(_)), "{e}");
        assert!(d.add("openat=0").is_err());
        assert!(d.add("openat=4096").is_err());
        assert!(d.add("=EPERM").is_err());
        assert!(d.add("").is_err());
        d.add("openat").unwrap();
        let e = d.add("openat=EACCES").unwrap_err();
        assert!(matches!(e.why, Why::Repeated(_)), "{e}");
    }
}
