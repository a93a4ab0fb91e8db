//! mantle-units: the one grammar of durations users write, for every
//! command-line flag and every system file (`--extended=50us`,
//! `--duration 10s`, `--timeout 500ms`, `quantum = "10ms"`, `edf
//! 2ms/10ms`).
//!
//! Mechanism: humantime's parser (`500ms`, `10s`, `1m`, `250us`, `750ns`,
//! `1h`, fractions such as `1.5ms`, and sums such as `1m30s`), with one rule of mantle's on top: a
//! bare number is refused, since `500` meant seconds to one flag and
//! milliseconds to another before there was one grammar.
//!
//! Invariants: pure (no system calls, no clock); the error says what was
//! written and what would have been accepted, in words a user reads
//! (callers add their own bounds, such as "not zero" or "at most 24 h").
//! No locks.

use std::time::Duration;

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// A number alone: which unit it meant is not guessed.
    #[error("{0:?} has no unit: write e.g. {0}ms or {0}s (units: ns, us, ms, s, m, h)")]
    NoUnit(String),
    /// Not a duration at all, or one too large; humantime's reason.
    #[error("{text:?} is not a duration ({why}; e.g. 250us, 500ms, 10s, 1m)")]
    Malformed { text: String, why: String },
}

/// Parses a duration written by a user: a number and a unit (`ns`, `us`
/// or `µs`, `ms`, `s`, `m`, `h`), or a sum of them (`1m30s`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(DurationError::NoUnit(t.to_string()));
    }
    // humantime knows "us" and "µs"; it refuses "μs" (Greek mu), which
    // looks the same on a screen
    let t = t.replace('\u{3bc}', "\u{b5}");
    humantime::parse_duration(&t).map_err(|e| DurationError::Malformed {
        text: text.to_string(),
        why: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_sums() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("750ns"), Duration::from_nanos(750));
        assert_eq!(ok("250us"), Duration::from_micros(250));
        assert_eq!(ok("250µs"), Duration::from_micros(250));
        assert_eq!(ok("250μs"), Duration::from_micros(250));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("10s"), Duration::from_secs(10));
        assert_eq!(ok("1m"), Duration::from_secs(60));
        assert_eq!(ok("2h"), Duration::from_secs(7200));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok(" 10ms "), Duration::from_millis(10));
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("1.5ms"), Duration::from_micros(1500));
    }

    #[test]
    fn a_bare_number_and_garbage_are_refused_in_words() {
        for bare in ["500", "0", "1.5"] {
            let e = parse_duration(bare).unwrap_err();
            assert!(matches!(e, DurationError::NoUnit(_)), "{bare}: {e:?}");
            assert!(e.to_string().contains("has no unit"), "{e}");
        }
        for bad in [
            "",
            "ms",
            "soon",
            "10 parsecs",
            "-5s",
            "10xs",
            "99999999999999999999999h",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(
                matches!(e, DurationError::Malformed { .. }),
                "{bad:?}: {e:?}"
            );
            assert!(!e.to_string().contains("..="), "{e}");
        }
    }
}
