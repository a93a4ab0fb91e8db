//! mantle-units: the one grammar of durations and of sizes users write,
//! for every command-line flag and every system file (`--extended=50us`,
//! `--duration 10s`, `--timeout 500ms`, `quantum = "10ms"`, `edf
//! 2ms/10ms`; `--stack-size 8KiB`, `cbuf = "8MiB"`).
//!
//! Durations: humantime's parser (`500ms`, `10s`, `1m`, `250us`, `750ns`,
//! `1h`, fractions such as `1.5ms`, and sums such as `1m30s`), with one rule of mantle's on top: a
//! bare number is refused, since `500` meant seconds to one flag and
//! milliseconds to another before there was one grammar.
//!
//! Sizes ([`parse_size`]): a whole number of bytes, alone (`4096`: a bare
//! number means bytes, everywhere) or with a binary unit: `B`, `K`/`KiB`
//! (1024), `M`/`MiB` (1024²), `G`/`GiB` (1024³), letters in either case
//! (`64k`, `16MiB`, `1G`). Decimal units (`KB`, `MB`, `GB`) are refused
//! rather than guessed (1000 or 1024?), and so are fractions (`1.5M`).
//! A flag or key that counts in a larger unit (pages, KiB) asks for a
//! whole number of them ([`SizeError::NotMultiple`]).
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

/// Why a size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not a size at all.
    #[error("{0:?} is not a size (e.g. 4096, 64KiB, 16MiB, 1G; a bare number is bytes)")]
    Malformed(String),
    /// A fraction: which byte it ends on is not guessed.
    #[error("{0:?} is not a whole number of bytes: write e.g. 1536KiB for 1.5MiB")]
    Fraction(String),
    /// KB, MB, GB: 1000 or 1024 is not guessed.
    #[error(
        "{text:?}: decimal units are not taken; write {number}{binary} (units: B, KiB, MiB, GiB)"
    )]
    Decimal {
        text: String,
        number: String,
        binary: &'static str,
    },
    /// More bytes than 64 bits hold.
    #[error("{0:?} is too large")]
    TooLarge(String),
    /// Not a whole number of the unit the value is kept in.
    #[error("{text:?} is not a whole number of {unit} ({bytes} bytes)")]
    NotMultiple {
        text: String,
        unit: &'static str,
        bytes: u64,
    },
}

/// Parses a size written by a user into bytes: a whole number, alone
/// (bytes) or with a binary unit (`B`, `K`/`KiB`, `M`/`MiB`, `G`/`GiB`,
/// either case, a space before it allowed).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, rest) = t.split_at(end);
    if digits.is_empty() {
        return Err(SizeError::Malformed(text.to_string()));
    }
    if rest.starts_with('.') {
        return Err(SizeError::Fraction(text.to_string()));
    }
    let unit = rest.trim_start();
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "kb" => return Err(decimal(text, digits, "KiB")),
        "mb" => return Err(decimal(text, digits, "MiB")),
        "gb" => return Err(decimal(text, digits, "GiB")),
        _ => return Err(SizeError::Malformed(text.to_string())),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| SizeError::TooLarge(text.to_string()))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::TooLarge(text.to_string()))
}

/// Parses a size kept as a count of `unit_bytes` units (pages, KiB): the
/// size must be a whole number of them. `unit` names them in the error.
pub fn parse_size_in(text: &str, unit_bytes: u64, unit: &'static str) -> Result<u64, SizeError> {
    let bytes = parse_size(text)?;
    if unit_bytes == 0 || bytes % unit_bytes != 0 {
        return Err(SizeError::NotMultiple {
            text: text.to_string(),
            unit,
            bytes,
        });
    }
    Ok(bytes / unit_bytes)
}

fn decimal(text: &str, number: &str, binary: &'static str) -> SizeError {
    SizeError::Decimal {
        text: text.to_string(),
        number: number.to_string(),
        binary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_bytes_and_binary_units() {
        let ok = |s: &str| parse_size(s).unwrap();
        assert_eq!(ok("4096"), 4096);
        assert_eq!(ok("0"), 0);
        assert_eq!(ok("512B"), 512);
        assert_eq!(ok("64KiB"), 64 << 10);
        assert_eq!(ok("64k"), 64 << 10);
        assert_eq!(ok("64K"), 64 << 10);
        assert_eq!(ok("64 KiB"), 64 << 10);
        assert_eq!(ok("16MiB"), 16 << 20);
        assert_eq!(ok("16m"), 16 << 20);
        assert_eq!(ok("1G"), 1 << 30);
        assert_eq!(ok(" 1gib "), 1 << 30);
        assert_eq!(ok("17179869183G"), 17179869183 << 30);
    }

    #[test]
    fn sizes_refused_in_words() {
        for (bad, want) in [
            ("", "is not a size"),
            ("KiB", "is not a size"),
            ("-1", "is not a size"),
            ("10 parsecs", "is not a size"),
            ("12TiB", "is not a size"),
            ("1.5M", "whole number of bytes"),
            ("64KB", "write 64KiB"),
            ("64kB", "write 64KiB"),
            ("2MB", "write 2MiB"),
            ("1GB", "write 1GiB"),
            ("18446744073709551616", "too large"),
            ("17179869184G", "too large"),
        ] {
            let e = parse_size(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad:?}: {e}");
            assert!(!e.contains("ParseIntError"), "{e}");
        }
    }

    #[test]
    fn sizes_in_a_larger_unit_are_whole() {
        assert_eq!(parse_size_in("8MiB", 1024, "KiB"), Ok(8192));
        assert_eq!(parse_size_in("64MiB", 4096, "4 KiB pages"), Ok(16384));
        let e = parse_size_in("1000", 1024, "KiB").unwrap_err();
        assert!(matches!(e, SizeError::NotMultiple { bytes: 1000, .. }));
        assert!(e.to_string().contains("whole number of KiB"), "{e}");
    }

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
