//! TEMPORARY (issue 10, part 1): a minimal stand-in for
//! `crate::agents::from_specs`, written by the executive's helper so that
//! `mantle run` can be built and tested before the built-in agents land.
//! It knows `--deny NAME[=ERRNO]` and `--perform NAME` only; the other
//! options are refused. The lead replaces every use of
//! [`from_specs`] here with `crate::agents::from_specs` at merge and
//! deletes this file. Pure.

use crate::agent::{Agent, Call, Decision, Guest, Perform};
use crate::spec::AgentSpecs;
use crate::sysno::Sysno;

/// The chain the options ask for (deny first, then perform).
pub fn from_specs(s: &AgentSpecs) -> Result<Vec<Box<dyn Agent>>, String> {
    if s.trace.is_some() || s.count || !s.redirect.is_empty() || !s.delay.is_empty() {
        return Err(
            "--trace, --count, --redirect and --delay come with the built-in agents (not in this build)"
                .into(),
        );
    }
    let mut v: Vec<Box<dyn Agent>> = Vec::new();
    for d in &s.deny {
        let (name, errno) = match d.split_once('=') {
            Some((n, e)) => (n, errno_of(e).ok_or(format!("unknown errno {e:?}"))?),
            None => (d.as_str(), libc::EPERM),
        };
        let nr = Sysno::from_name(name).ok_or(format!("unknown system call {name:?}"))?;
        v.push(Box::new(Deny { nr, errno }));
    }
    for p in &s.perform {
        let nr = Sysno::from_name(p).ok_or(format!("unknown system call {p:?}"))?;
        v.push(Box::new(PerformSame { nr }));
    }
    Ok(v)
}

fn errno_of(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return (n > 0 && n < 4096).then_some(n);
    }
    Some(match s {
        "EPERM" => libc::EPERM,
        "ENOENT" => libc::ENOENT,
        "EACCES" => libc::EACCES,
        "EIO" => libc::EIO,
        "EINVAL" => libc::EINVAL,
        "ENOSYS" => libc::ENOSYS,
        "EAGAIN" => libc::EAGAIN,
        "EBUSY" => libc::EBUSY,
        _ => return None,
    })
}

struct Deny {
    nr: Sysno,
    errno: i32,
}

impl Agent for Deny {
    fn name(&self) -> &str {
        "deny"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![self.nr]
    }
    fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
        Decision::Fail(self.errno)
    }
}

/// Performs the call itself, unchanged, on the guest's behalf.
struct PerformSame {
    nr: Sysno,
}

impl Agent for PerformSame {
    fn name(&self) -> &str {
        "perform"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![self.nr]
    }
    fn before(&mut self, c: &Call, _: &mut dyn Guest) -> Decision {
        Decision::Perform(Perform {
            nr: c.nr,
            args: c.args,
            path: None,
        })
    }
}
