//! `--stamp NAME=FILE`: the one-way trap, guest → executive (the paper's
//! Table 1 row "Trap from Guest to Executive"), for benchmarks.
//!
//! The guest stores its own CLOCK_MONOTONIC time in ns in the first
//! argument of call NAME just before making it (bench/executive/guest.c
//! does so for getppid); the executive stamps each call with the same
//! clock when it receives it ([`Call::received_ns`], both paths). This
//! agent keeps `received_ns - arg0` per call in memory reserved at start
//! (no allocation, no I/O on the path) and writes the samples, ns, one per
//! line, to FILE when the guest's chain is dropped at the end. It decides
//! nothing (always Continue), so it runs first in the chain and a later
//! agent (`--perform`) decides the call.
//!
//! The argument is the guest's claim: a value that is not a time shortly
//! before receipt (in the future, or more than 10 s old) is not a sample,
//! it is counted as refused and noted at the end of FILE.

use super::{parse_call, SpecError, Why};
use crate::agent::{Agent, Call, Decision, Guest};
use crate::sysno::Sysno;
use std::io::Write;

/// Samples kept at most (8 MiB); later calls are counted, not kept.
pub const MAX_SAMPLES: usize = 1 << 20;

/// A sample older than this is not one (the argument was not a stamp).
const MAX_NS: u64 = 10_000_000_000;

/// Records one-way trap times of one call.
pub struct Stamp {
    nr: Sysno,
    samples: Vec<u64>,
    /// Calls past MAX_SAMPLES.
    dropped: u64,
    /// Calls whose argument was not a plausible stamp.
    refused: u64,
    out: Option<Box<dyn Write + Send>>,
}

impl Stamp {
    /// Parses `NAME=FILE` and creates FILE now, so that a path that cannot
    /// be written is refused before the guest starts.
    pub fn from_spec(spec: &str) -> Result<Stamp, SpecError> {
        let err = |w| SpecError::new("stamp", spec, w);
        let (name, file) = spec
            .split_once('=')
            .filter(|(n, f)| !n.is_empty() && !f.is_empty())
            .ok_or_else(|| err(Why::Syntax("NAME=FILE")))?;
        let nr = parse_call(name.trim()).map_err(err)?;
        let f = std::fs::File::create(file)
            .map_err(|e| err(Why::Other(format!("cannot create {file}: {e}"))))?;
        Ok(Stamp::new(nr, Box::new(std::io::BufWriter::new(f))))
    }

    /// Records call `nr` and writes to `out` when dropped.
    pub fn new(nr: Sysno, out: Box<dyn Write + Send>) -> Stamp {
        Stamp {
            nr,
            samples: Vec::with_capacity(MAX_SAMPLES),
            dropped: 0,
            refused: 0,
            out: Some(out),
        }
    }

    fn write(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        for s in &self.samples {
            writeln!(out, "{s}")?;
        }
        if self.dropped > 0 || self.refused > 0 {
            writeln!(
                out,
                "# not kept: {} past {MAX_SAMPLES} samples, {} whose argument was not a stamp",
                self.dropped, self.refused
            )?;
        }
        out.flush()
    }
}

impl Agent for Stamp {
    fn name(&self) -> &str {
        "stamp"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![self.nr]
    }
    fn before(&mut self, call: &Call, _: &mut dyn Guest) -> Decision {
        if call.nr == self.nr && call.received_ns != 0 {
            match call.received_ns.checked_sub(call.args[0]) {
                Some(d) if d < MAX_NS => {
                    if self.samples.len() < self.samples.capacity() {
                        self.samples.push(d);
                    } else {
                        self.dropped += 1;
                    }
                }
                _ => self.refused += 1,
            }
        }
        Decision::Continue
    }
}

impl Drop for Stamp {
    fn drop(&mut self) {
        if let Some(mut out) = self.out.take() {
            // nothing to report an error to at the end but stderr
            if let Err(e) = self.write(&mut out) {
                eprintln!("mantle: --stamp: cannot write the samples: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn call(nr: Sysno, a0: u64, received_ns: u64) -> Call {
        Call {
            tid: 1,
            nr,
            args: [a0, 0, 0, 0, 0, 0],
            ip: 0,
            received_ns,
            start_ns: received_ns,
        }
    }

    #[test]
    fn keeps_receipt_minus_the_guests_stamp_and_refuses_implausible_ones() {
        let getppid = Sysno::from_name("getppid").unwrap();
        let other = Sysno::from_name("getpid").unwrap();
        let sink = Sink::default();
        let mut s = Stamp::new(getppid, Box::new(sink.clone()));
        assert_eq!(s.wants(), vec![getppid]);
        let mut g = FakeGuest::default();
        let now = 50_000_000_000u64;
        for (a0, rec) in [
            (now - 2_500, now),  // 2.5 us: kept
            (now - 900, now),    // kept
            (now + 10, now),     // from the future: refused
            (now - MAX_NS, now), // too old: refused
            (0, now),            // not a stamp: refused
            (now - 100, 0),      // receipt unknown: ignored
        ] {
            assert_eq!(
                s.before(&call(getppid, a0, rec), &mut g),
                Decision::Continue
            );
        }
        assert_eq!(
            s.before(&call(other, now - 5, now), &mut g),
            Decision::Continue
        );
        drop(s);
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            format!("2500\n900\n# not kept: 0 past {MAX_SAMPLES} samples, 3 whose argument was not a stamp\n")
        );
    }

    #[test]
    fn spec_needs_a_call_and_a_file() {
        for bad in ["getppid", "=x", "getppid=", "nosuchcall=/tmp/x"] {
            assert!(Stamp::from_spec(bad).is_err(), "{bad}");
        }
        let e = Stamp::from_spec("getppid=/nonexistent-dir/x")
            .err()
            .unwrap();
        assert!(e.to_string().contains("cannot create"), "{e}");
        let dir = std::env::temp_dir().join(format!("mantle-stamp-{}", std::process::id()));
        let ok = Stamp::from_spec(&format!("getppid={}", dir.display())).unwrap();
        drop(ok);
        assert_eq!(std::fs::read_to_string(&dir).unwrap(), "");
        std::fs::remove_file(&dir).unwrap();
    }
}
