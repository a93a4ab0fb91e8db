//! `mantle tags export`: follows lifeline rings as they grow and sends
//! their receptions as spans, until told to stop.
//!
//! Two threads: the reader polls the rings (mapped memory: no system call
//! per record) every `poll` and queues spans; the sender takes batches
//! from the queue and posts them. A slow or absent collector then fills the
//! bounded queue ([`crate::queue`]), never the reader's view of the rings:
//! what is let go is counted where it is let go. A ring that wraps between
//! two polls loses records before anyone read them: counted too
//! (`lost_in_ring`).
//!
//! Lock order: one lock (the queue); the sender never holds it while
//! sending.
//!
//! Which tags: those named (each must exist and have a lifeline when the
//! export starts; one deleted later is followed again if made anew), or
//! every tag with a lifeline, looked up again every second. Reading needs
//! the privilege `mantle tag lifeline` needs: the first read happens before
//! anything starts, so an unprivileged user is refused at once.

use crate::http::{self, Endpoint};
use crate::lifeline::{self, Linker, Out};
use crate::queue::{Policy, Queue, Stats};
use crate::Error;
use mantle_tags::{TagInfo, Tags};
use prost::Message;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How to export.
#[derive(Debug, Clone)]
pub struct Options {
    /// Tags to follow (None: every tag with a lifeline).
    pub tags: Option<Vec<String>>,
    /// Also send what the rings hold at the start (otherwise only what
    /// they receive from then on; the backlog still gives parents).
    pub backlog: bool,
    /// How often the rings are read.
    pub poll: Duration,
    /// The deadline of one request.
    pub timeout: Duration,
    pub policy: Policy,
    /// Threads the linker remembers.
    pub max_threads: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            tags: None,
            backlog: true,
            poll: Duration::from_millis(200),
            timeout: Duration::from_secs(10),
            policy: Policy::default(),
            max_threads: 65536,
        }
    }
}

/// Where an export stands.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    /// Receptions read from the rings.
    pub receptions: u64,
    /// Receptions the rings overwrote before they were read.
    pub lost_in_ring: u64,
    /// Tags followed now.
    pub tags: usize,
    /// The queue's counts (sent, dropped and why).
    pub queue: Stats,
    /// Times the linker forgot its threads (bounded memory).
    pub linker_forgotten: u64,
    /// The collector's last error, while it fails.
    pub failing: Option<String>,
}

/// CLOCK_REALTIME - CLOCK_MONOTONIC now, in ns.
pub fn epoch_offset_ns() -> i128 {
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    real - mantle_sys::os::monotonic_ns() as i128
}

/// A followed tag.
struct Followed {
    trace: [u8; 16],
    generation: u32,
    after: u64,
}

/// The trace of a tag as listed.
pub fn trace_of(i: &TagInfo, host: &str) -> [u8; 16] {
    if i.scope == "global" {
        lifeline::trace_id(&i.name, None)
    } else {
        lifeline::trace_id(&i.name, Some((host, i.created_ns)))
    }
}

/// The tags to follow now: those named, or every tag with a lifeline.
fn wanted(t: &Tags, names: &Option<Vec<String>>) -> Result<Vec<TagInfo>, Error> {
    let all = t.list()?;
    Ok(match names {
        None => all.into_iter().filter(|i| i.lifeline > 0).collect(),
        Some(n) => all.into_iter().filter(|i| n.contains(&i.name)).collect(),
    })
}

/// Checks what `tags export` is asked to read, before it starts: every
/// named tag exists and has a lifeline, and the caller may read it.
pub fn check(t: &Tags, names: &Option<Vec<String>>) -> Result<(), Error> {
    match names {
        Some(n) => {
            for name in n {
                t.lifeline_since(name, u64::MAX)?;
            }
        }
        None => {
            for i in wanted(t, names)? {
                t.lifeline_since(&i.name, u64::MAX)?;
            }
            // With no tag yet, reading still needs the privilege.
            if !mantle_sys::os::privileged() {
                return Err(Error::Tags(mantle_tags::Error::Permission(
                    "reading lifelines needs root".into(),
                )));
            }
        }
    }
    Ok(())
}

/// Runs the export until `stop()` says so, then sends what is queued
/// (within one request timeout) and returns where it stands. `progress`
/// gets the report after each poll.
pub fn run(
    ep: &Endpoint,
    o: &Options,
    stop: &(dyn Fn() -> bool + Sync),
    progress: &mut dyn FnMut(&Report),
) -> Result<Report, Error> {
    let t = Tags::open()?;
    check(&t, &o.tags)?;
    let host = mantle_sys::os::hostname();
    let shared = Arc::new((Mutex::new(Queue::<Out>::new(o.policy)), Condvar::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let (shared, done, ep2, timeout) = (shared.clone(), done.clone(), ep.clone(), o.timeout);
        std::thread::Builder::new()
            .name("otlp-send".into())
            .spawn(move || send_loop(&shared, &done, &ep2, timeout))
            .map_err(|e| Error::Export {
                url: ep.url.clone(),
                why: format!("cannot start the sender thread: {e}"),
            })?
    };
    let mut linker = Linker::new(epoch_offset_ns(), o.max_threads);
    let mut followed: BTreeMap<String, Followed> = BTreeMap::new();
    let mut report = Report::default();
    let mut first = true;
    let mut listed = Instant::now() - Duration::from_secs(10);
    let mut infos = Vec::new();
    loop {
        let stopping = stop();
        if listed.elapsed() >= Duration::from_secs(1) || first {
            infos = wanted(&t, &o.tags)?;
            listed = Instant::now();
        }
        linker.epoch_offset_ns = epoch_offset_ns();
        let mut spans = Vec::new();
        for i in &infos {
            let f = followed.entry(i.name.clone()).or_insert(Followed {
                trace: trace_of(i, &host),
                generation: i.generation,
                after: 0,
            });
            if f.generation != i.generation {
                // a new tag of the same name: a new trace, a new ring
                *f = Followed {
                    trace: trace_of(i, &host),
                    generation: i.generation,
                    after: 0,
                };
            }
            let read = match t.lifeline_since(&i.name, f.after) {
                Ok(r) => r,
                // deleted (or made without a lifeline) since it was listed
                Err(mantle_tags::Error::UnknownTag(_) | mantle_tags::Error::Invalid(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            if read.generation != f.generation {
                continue; // listed before a delete and a create: next poll
            }
            f.after = read.next;
            report.receptions += read.records.len() as u64;
            if first && !o.backlog {
                for r in &read.records {
                    linker.learn(f.trace, r);
                }
            } else {
                if !first {
                    // (what wrapped before the start is no loss of ours)
                    report.lost_in_ring += read.lost;
                }
                spans.extend(linker.spans(f.trace, &read.records));
            }
        }
        followed.retain(|n, _| infos.iter().any(|i| &i.name == n));
        first = false;
        report.tags = followed.len();
        report.linker_forgotten = linker.forgotten;
        {
            let (q, cv) = &*shared;
            let mut q = q.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            for s in spans {
                q.push(now, s);
            }
            report.queue = q.stats;
            report.failing = q.failing.clone();
            cv.notify_one();
        }
        progress(&report);
        if stopping {
            break;
        }
        std::thread::sleep(o.poll);
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    shared.1.notify_one();
    let _ = sender.join();
    let q = shared.0.lock().unwrap_or_else(|e| e.into_inner());
    report.queue = q.stats;
    report.failing = q.failing.clone();
    Ok(report)
}

/// The sender: posts batches as they are due, until `done`; then one last
/// try for what is left, and what still is not sent is counted as dropped
/// (expired).
fn send_loop(
    shared: &(Mutex<Queue<Out>>, Condvar),
    done: &std::sync::atomic::AtomicBool,
    ep: &Endpoint,
    timeout: Duration,
) {
    let (q, cv) = shared;
    let mut last_round = false;
    loop {
        let finishing = done.load(std::sync::atomic::Ordering::SeqCst);
        let batch = {
            let mut g = q.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            g.expire(now);
            let due = g.due(now, finishing).map(|b| {
                let n = b.len();
                let body = lifeline::request(
                    b.into_iter()
                        .map(|o| Out {
                            resource: o.resource.clone(),
                            span: o.span.clone(),
                        })
                        .collect(),
                )
                .encode_to_vec();
                (n, body)
            });
            if due.is_none() {
                if finishing && (g.is_empty() || last_round) {
                    g.drop_all();
                    return;
                }
                if finishing {
                    last_round = true;
                }
                let wait = g
                    .next_try()
                    .map(|t| t.saturating_duration_since(now))
                    .unwrap_or(Duration::from_millis(100))
                    .clamp(Duration::from_millis(1), Duration::from_millis(100));
                let _ = cv.wait_timeout(g, wait);
                continue;
            }
            due
        };
        let Some((n, body)) = batch else { continue };
        let r = http::post(ep, "/v1/traces", &body, timeout);
        let mut g = q.lock().unwrap_or_else(|e| e.into_inner());
        match r {
            Ok(_) => g.sent(n),
            Err(f) => {
                let retry = f.retryable();
                g.failed(Instant::now(), n, retry, f.to_string());
                if finishing && last_round {
                    // the last try failed: what is left is dropped
                    g.drop_all();
                    return;
                }
                if finishing {
                    last_round = true;
                }
            }
        }
    }
}

/// `mantle tag lifeline NAME --otlp URL`: sends `records` (one tag's,
/// merged) as one trace, in requests of at most `batch` spans; the first
/// failure ends it. The number of spans sent.
pub fn send_once(
    ep: &Endpoint,
    trace: [u8; 16],
    records: &[mantle_tags::ReceptionInfo],
    timeout: Duration,
    batch: usize,
) -> Result<usize, Error> {
    let mut linker = Linker::new(epoch_offset_ns(), usize::MAX);
    let spans = linker.spans(trace, records);
    let n = spans.len();
    let mut it = spans.into_iter().peekable();
    let deadline = Instant::now() + timeout;
    while it.peek().is_some() {
        let chunk: Vec<Out> = it.by_ref().take(batch.max(1)).collect();
        let body = lifeline::request(chunk).encode_to_vec();
        let left = deadline.saturating_duration_since(Instant::now());
        http::post(ep, "/v1/traces", &body, left.max(Duration::from_millis(1))).map_err(|f| {
            Error::Export {
                url: ep.url_of("/v1/traces"),
                why: f.to_string(),
            }
        })?;
    }
    Ok(n)
}
