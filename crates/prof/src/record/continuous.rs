//! Continuous recording (`record --continuous DIR --rotate 60s --keep 1h`):
//! one session per period in DIR, the oldest deleted beyond `--keep` (and
//! beyond `--max-size`), the shape of Parca or the OpenTelemetry profiler
//! on one machine.
//!
//! Mechanism: the events, the sample path and the side band stay open
//! for the whole recording; a rotation is one more drain. At the end of a
//! period the side band is replayed and the sample path drained (which
//! flips the count maps: samples taken before the flip are in this
//! period's profile, the ones after go to the map that the next drain
//! reads), the profile is taken out of the drainer, and a writer thread
//! writes it as a session named by its start time (UTC,
//! `20261129T114500.000Z`) while sampling goes on. At most one write is
//! under way: the next rotation first waits for the previous one, and
//! then deletes the oldest sessions beyond the bounds.
//!
//! Invariant: no sample is lost or counted twice at a rotation: every
//! sample drained goes into exactly one period's profile, and a sample
//! that lands in a count map after it was drained (a program run that
//! read the map selector just before the flip) stays there until the
//! drain after, which puts it in the next period. The test
//! `continuous_sessions_partition_the_samples` checks that the sessions'
//! samples add up to what the sample path counted. Only directories of
//! this naming with a meta.json are ever deleted.

use crate::model::{Mapping, Meta, Process, Profile, TagName};
use crate::session::{self, SessionData};
use crate::Error;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

/// `--continuous DIR --rotate D --keep D [--max-size BYTES]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuous {
    /// Where the sessions go (made if missing, not its parents).
    pub dir: PathBuf,
    /// Length of one period (one session).
    pub rotate: Duration,
    /// How far back sessions are kept: the newest ceil(keep / rotate).
    pub keep: Duration,
    /// Also delete the oldest while the sessions take more bytes than
    /// this (the newest is always kept).
    pub max_bytes: Option<u64>,
}

/// Shortest period: a session write (kallsyms, tables) takes tens of
/// milliseconds, and a period shorter than a drain means nothing.
pub const ROTATE_MIN: Duration = Duration::from_millis(100);

impl Continuous {
    /// How many sessions are kept: ceil(keep / rotate).
    pub fn keep_count(&self) -> usize {
        let (k, r) = (self.keep.as_nanos(), self.rotate.as_nanos().max(1));
        k.div_ceil(r).max(1) as usize
    }

    /// The options' own checks (pure).
    pub fn check(&self, drain: Duration) -> Result<(), Error> {
        if self.rotate < ROTATE_MIN {
            return Err(Error::Invalid(format!(
                "--rotate must be at least {}ms",
                ROTATE_MIN.as_millis()
            )));
        }
        if self.rotate < drain {
            return Err(Error::Invalid(format!(
                "--rotate ({:?}) is shorter than the drain interval ({:?}): a period ends at a drain",
                self.rotate, drain
            )));
        }
        if self.keep < self.rotate {
            return Err(Error::Invalid(format!(
                "--keep ({:?}) is shorter than --rotate ({:?}): not even one session would be kept",
                self.keep, self.rotate
            )));
        }
        if self.max_bytes == Some(0) {
            return Err(Error::Invalid("--max-size must be more than 0".into()));
        }
        Ok(())
    }
}

/// Days since 1970-01-01 -> (year, month, day) in the proleptic
/// Gregorian calendar (Howard Hinnant's civil_from_days).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The name of the session of a period starting at `unix_ns`:
/// `YYYYMMDDTHHMMSS.mmmZ` (UTC), which sorts in time order. Pure.
pub fn session_name(unix_ns: u64) -> String {
    let secs = (unix_ns / 1_000_000_000) as i64;
    let ms = (unix_ns / 1_000_000) % 1000;
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{y:04}{mo:02}{d:02}T{:02}{:02}{:02}.{ms:03}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// Whether `name` is a [`session_name`]. Pure.
pub fn is_session_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 20
        && b[8] == b'T'
        && b[15] == b'.'
        && b[19] == b'Z'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 8 | 15 | 19) || c.is_ascii_digit())
}

/// Which sessions to delete, oldest first: `sessions` are (name, bytes)
/// in time order; beyond the newest `keep` and, with `max_bytes`, the
/// oldest while the rest take more (the newest always stays). Pure.
pub fn to_delete(sessions: &[(String, u64)], keep: usize, max_bytes: Option<u64>) -> Vec<String> {
    let n = sessions.len();
    let mut cut = n.saturating_sub(keep);
    if let Some(max) = max_bytes {
        let mut total: u64 = sessions[cut..].iter().map(|s| s.1).sum();
        while cut + 1 < n && total > max {
            total -= sessions[cut].1;
            cut += 1;
        }
    }
    sessions[..cut].iter().map(|s| s.0.clone()).collect()
}

/// Bytes of the regular files under `dir`.
fn du(dir: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => n += du(&e.path()),
                Ok(t) if t.is_file() => n += e.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    n
}

/// One period's session, owned (it is written on another thread).
pub(super) struct PeriodData {
    pub meta: Meta,
    pub profile: Profile,
    pub procs: HashMap<u32, Process>,
    pub history: Vec<(u32, Mapping)>,
    pub tags: Vec<TagName>,
    pub jit_maps: Vec<(u32, String)>,
    pub cgroups: Vec<(u64, String)>,
}

/// What a continuous recording wrote and deleted.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ContinuousSummary {
    pub dir: String,
    /// Sessions written, oldest first (names in `dir`).
    pub written: Vec<String>,
    /// Of which deleted (beyond --keep or --max-size).
    pub deleted: Vec<String>,
    /// Samples in all sessions written.
    pub samples: u64,
}

/// Writes the periods' sessions in order on a thread of its own (a queue:
/// a rotation never waits for a write), and after each one deletes the
/// oldest beyond the bounds.
pub(super) struct Writer {
    c: Continuous,
    queue: Option<std::sync::mpsc::Sender<(PathBuf, PeriodData)>>,
    thread: Option<JoinHandle<Result<Vec<String>, Error>>>,
    pub summary: ContinuousSummary,
}

/// The writer thread: each queued period written, then DIR pruned.
fn write_all(
    c: Continuous,
    queue: std::sync::mpsc::Receiver<(PathBuf, PeriodData)>,
) -> Result<Vec<String>, Error> {
    let mut deleted = Vec::new();
    for (out, d) in queue {
        let ks = super::host::kallsyms_text();
        let vdso = crate::kernel::vdso_image();
        let mut meta = d.meta;
        meta.kernel_symbols = ks.is_some();
        session::write_session(
            &out,
            &SessionData {
                meta: &meta,
                profile: &d.profile,
                procs: &d.procs,
                history: &d.history,
                tags: &d.tags,
                kallsyms_text: ks.as_deref(),
                vdso: vdso.as_deref(),
                jit_maps: &d.jit_maps,
                cgroups: &d.cgroups,
                // --off-cpu is refused with --continuous
                off_cpu: None,
            },
            false,
        )?;
        deleted.extend(prune(&c)?);
    }
    Ok(deleted)
}

/// Deletes the oldest sessions of DIR beyond the bounds; their names.
fn prune(c: &Continuous) -> Result<Vec<String>, Error> {
    let mut names: Vec<String> = std::fs::read_dir(&c.dir)
        .map_err(|e| Error::Io {
            op: "read",
            path: c.dir.clone(),
            source: e,
        })?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_session_name(n) && c.dir.join(n).join("meta.json").is_file())
        .collect();
    names.sort();
    let sized: Vec<(String, u64)> = names
        .into_iter()
        .map(|n| {
            let b = if c.max_bytes.is_some() {
                du(&c.dir.join(&n))
            } else {
                0
            };
            (n, b)
        })
        .collect();
    let gone = to_delete(&sized, c.keep_count(), c.max_bytes);
    for n in &gone {
        let p = c.dir.join(n);
        std::fs::remove_dir_all(&p).map_err(|e| Error::Io {
            op: "remove",
            path: p,
            source: e,
        })?;
    }
    Ok(gone)
}

impl Writer {
    /// Makes DIR if missing (not its parents), checks that sessions can
    /// be made in it, before recording starts, and starts the writer.
    pub fn new(c: &Continuous) -> Result<Writer, Error> {
        match std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&c.dir)
        {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && c.dir.is_dir() => {}
            Err(e) => {
                return Err(Error::Io {
                    op: "create",
                    path: c.dir.clone(),
                    source: e,
                })
            }
        }
        session::check_writable(&c.dir.join("probe"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        let cc = c.clone();
        let thread = std::thread::Builder::new()
            .name("prof-writer".into())
            .spawn(move || write_all(cc, rx))
            .map_err(|e| Error::os("start the session writer thread", e))?;
        Ok(Writer {
            c: c.clone(),
            queue: Some(tx),
            thread: Some(thread),
            summary: ContinuousSummary {
                dir: c.dir.display().to_string(),
                ..Default::default()
            },
        })
    }

    /// The writer's error, if it stopped on one (a write that failed:
    /// the recording stops rather than go on losing periods).
    fn check(&mut self) -> Result<(), Error> {
        if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
            self.queue = None;
            return self.finish();
        }
        Ok(())
    }

    /// Waits until every queued session is written and DIR pruned.
    pub fn finish(&mut self) -> Result<(), Error> {
        self.queue = None;
        if let Some(t) = self.thread.take() {
            let deleted = t
                .join()
                .map_err(|_| Error::Kernel("the session writer thread panicked".into()))??;
            self.summary.deleted.extend(deleted);
        }
        Ok(())
    }

    /// Queues one period's session.
    pub fn submit(&mut self, d: PeriodData) -> Result<(), Error> {
        self.check()?;
        let mut ns = d.meta.start_unix_ns;
        let mut name = session_name(ns);
        // two periods in one millisecond (never with ROTATE_MIN): move
        // the name on, keeping the naming
        while self.summary.written.last() >= Some(&name) {
            ns += 1_000_000;
            name = session_name(ns);
        }
        let out = self.c.dir.join(&name);
        self.summary.written.push(name);
        self.summary.samples = self.summary.samples.saturating_add(d.profile.total());
        // (the error of send gives the period back: not needed)
        let sent = self
            .queue
            .as_ref()
            .is_some_and(|q| q.send((out, d)).is_ok());
        if !sent {
            // the writer is gone: its error says why
            self.finish()?;
            return Err(Error::Kernel("the session writer thread stopped".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_in_time_order_and_are_utc() {
        // 2026-11-29 11:45:00.123 UTC
        let t = 1_795_952_700_123_000_000u64;
        assert_eq!(session_name(t), "20261129T114500.123Z");
        assert_eq!(session_name(0), "19700101T000000.000Z");
        // a leap day
        assert_eq!(
            session_name(951_782_400_000_000_000),
            "20000229T000000.000Z"
        );
        assert!(session_name(t) < session_name(t + 1_000_000));
        assert!(is_session_name("20261129T114500.123Z"));
        for bad in [
            "20261129T114500Z",
            "2026112xT114500.123Z",
            "s",
            "20261129T114500.123Z/",
        ] {
            assert!(!is_session_name(bad), "{bad}");
        }
    }

    #[test]
    fn deletes_the_oldest_beyond_count_and_size() {
        let s = |v: &[(&str, u64)]| -> Vec<(String, u64)> {
            v.iter().map(|(n, b)| (n.to_string(), *b)).collect()
        };
        let v = s(&[("a", 10), ("b", 10), ("c", 10), ("d", 10)]);
        assert_eq!(to_delete(&v, 3, None), ["a"]);
        assert_eq!(to_delete(&v, 4, None), Vec::<String>::new());
        assert_eq!(to_delete(&v, 9, Some(25)), ["a", "b"]);
        assert_eq!(to_delete(&v, 2, Some(100)), ["a", "b"]);
        // the newest stays, even alone above the bound
        assert_eq!(to_delete(&v, 9, Some(1)), ["a", "b", "c"]);
        assert!(to_delete(&[], 1, Some(1)).is_empty());
    }

    #[test]
    fn options_are_checked() {
        let c = |rotate: u64, keep: u64| Continuous {
            dir: "d".into(),
            rotate: Duration::from_millis(rotate),
            keep: Duration::from_millis(keep),
            max_bytes: None,
        };
        let drain = Duration::from_millis(1000);
        c(1000, 3000).check(drain).unwrap();
        assert_eq!(c(1000, 3000).keep_count(), 3);
        assert_eq!(c(60_000, 3_600_000).keep_count(), 60);
        assert_eq!(c(1000, 2500).keep_count(), 3);
        assert!(c(1000, 999).check(drain).is_err());
        assert!(c(50, 1000).check(Duration::from_millis(10)).is_err());
        assert!(c(500, 1000).check(drain).is_err());
        let mut z = c(1000, 1000);
        z.max_bytes = Some(0);
        assert!(z.check(drain).is_err());
    }
}
