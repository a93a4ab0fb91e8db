//! `--deny NAME[=ERRNO]`: the calls fail with ERRNO (default EPERM)
//! without being made. NAME is a call family (`open`, `exec`, ...:
//! [`crate::family`]), or a member of one (the whole family: denying
//! `openat` alone would leave `open`, `openat2`, `creat` and
//! `open_by_handle_at` to the guest), or a call in no family, or a raw
//! number (exactly that call). One agent holds every `--deny` of a guest
//! (a map from call to errno), so that the chain stays short and a call
//! named twice is caught at parse time.
//!
//! No guest memory is read: the decision rests on the call number alone,
//! which the guest cannot change after the check, so there is no TOCTOU;
//! the call reaches the agent through the kernel's seccomp filter on both
//! paths (on the fast path through the enforcement gate,
//! `crate::fast::gate`), so nothing the guest does in its own memory can
//! skip it.
//!
//! The guest's start: the launcher execs the command after the filter is
//! in place, so a denied `exec` family would deny the start itself. The
//! first exec-family call of the guest's first process (whose pid the
//! executive gives with [`Agent::started`]) is let through, once: it is
//! the launcher's (no guest code has run in that process yet); every
//! later exec, including the guest's first own, is denied.

use super::{errno, SpecError, Why};
use crate::agent::{Agent, Call, Decision, Guest};
use crate::family::{self, Resolved};
use crate::sysno::Sysno;
use std::collections::BTreeMap;

/// Fails the calls it holds with their errno.
#[derive(Debug, Default)]
pub struct Deny {
    rules: BTreeMap<Sysno, i32>,
    /// What each spec meant, for `mantle run -v`.
    meant: Vec<String>,
    /// The guest's first process, until its start exec went through.
    start: Option<u32>,
}

impl Deny {
    /// Adds one `NAME[=ERRNO]` spec.
    pub fn add(&mut self, spec: &str) -> Result<(), SpecError> {
        let err = |why| SpecError::new("deny", spec, why);
        let (name, e) = match spec.split_once('=') {
            Some((n, e)) => (n.trim(), Some(e)),
            None => (spec.trim(), None),
        };
        if name.is_empty() {
            return Err(err(Why::Syntax("a call, a call family or a number")));
        }
        let r = family::resolve(name).ok_or_else(|| {
            err(match super::parse_call(name) {
                Err(w) => w,
                Ok(_) => Why::Other(format!("{name}: not a call this executive can deny")),
            })
        })?;
        let e = match e {
            None => libc::EPERM,
            Some(e) => errno::parse(e.trim()).ok_or_else(|| err(Why::BadErrno(e.to_string())))?,
        };
        let nrs = r.numbers();
        if let Some(dup) = nrs.iter().find(|n| self.rules.contains_key(n)) {
            return Err(err(Why::Repeated(dup.name().into_owned())));
        }
        for n in &nrs {
            self.rules.insert(*n, e);
        }
        self.meant.push(match r {
            Resolved::Family(f) => format!(
                "{name}: the {} family ({})",
                f.name,
                f.members.iter().map(|m| m.0).collect::<Vec<_>>().join(" ")
            ),
            Resolved::Call(n) => format!("{name}: {n} alone (in no family)"),
            Resolved::Number(n) => format!("{name}: call number {} alone", n.0),
        });
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The errno `nr` fails with, if denied.
    pub fn errno_of(&self, nr: Sysno) -> Option<i32> {
        self.rules.get(&nr).copied()
    }

    /// What each spec was taken to mean, in order.
    pub fn meant(&self) -> &[String] {
        &self.meant
    }
}

impl Agent for Deny {
    fn name(&self) -> &str {
        "deny"
    }
    fn wants(&self) -> Vec<Sysno> {
        self.rules.keys().copied().collect()
    }
    fn started(&mut self, pid: u32) {
        self.start = Some(pid);
    }
    fn before(&mut self, call: &Call, _: &mut dyn Guest) -> Decision {
        let Some(&e) = self.rules.get(&call.nr) else {
            return Decision::Continue;
        };
        if self.start == Some(call.tid) && family::of(call.nr).is_some_and(|f| f.name == "exec") {
            self.start = None;
            return Decision::Continue;
        }
        Decision::Fail(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;

    fn nr(n: &str) -> Sysno {
        Sysno::from_name(n).unwrap()
    }

    pub(super) fn call(n: &str) -> Call {
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
        // a member stands for its family
        assert_eq!(d.before(&call("creat"), &mut g), Decision::Fail(13));
        assert_eq!(d.before(&call("rmdir"), &mut g), Decision::Fail(2));
        assert_eq!(d.wants().len(), 6 + 1 + 3 + 2);
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
        // another member of the same family is the same family
        let e = d.add("creat=EROFS").unwrap_err();
        assert!(matches!(e.why, Why::Repeated(_)), "{e}");
        // a raw number of a member is a repeat too
        assert!(d.add("2").is_err());
        // a number no call has is refused; a free one is that call alone
        assert!(d.add("1024").is_err());
        d.add("39").unwrap();
        assert_eq!(d.wants().len(), 7);
    }
}

#[cfg(test)]
mod start_tests {
    use super::*;
    use crate::agent::fake::FakeGuest;

    fn exec_by(tid: u32, name: &str) -> Call {
        Call {
            tid,
            ..super::tests::call(name)
        }
    }

    /// The launcher's exec passes once; the guest's own execs, from the
    /// same pid or another, and by either call of the family, fail.
    #[test]
    fn the_start_exec_passes_once_and_every_later_exec_fails() {
        let mut d = Deny::default();
        d.add("execve=EACCES").unwrap();
        let mut g = FakeGuest::default();
        // before started(): nothing passes
        assert_eq!(d.before(&exec_by(40, "execve"), &mut g), Decision::Fail(13));
        d.started(40);
        assert_eq!(
            d.before(&exec_by(41, "execveat"), &mut g),
            Decision::Fail(13)
        );
        assert_eq!(d.before(&exec_by(40, "execve"), &mut g), Decision::Continue);
        for (tid, name) in [(40, "execve"), (40, "execveat"), (41, "execve")] {
            assert_eq!(d.before(&exec_by(tid, name), &mut g), Decision::Fail(13));
        }
    }

    /// The start rule is the exec family's only: another denied call of
    /// the first process fails at once.
    #[test]
    fn the_start_rule_lets_no_other_call_through() {
        let mut d = Deny::default();
        d.add("open").unwrap();
        d.started(40);
        let mut g = FakeGuest::default();
        assert_eq!(d.before(&exec_by(40, "openat"), &mut g), Decision::Fail(1));
    }
}
