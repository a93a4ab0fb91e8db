//! Lifelines as OTLP traces. Pure: no system calls (the caller gives the
//! clock offset).
//!
//! - Each tag is one trace. A global tag (the cluster table's, the same
//!   name on every machine) has the trace id of its name, so every
//!   machine's exporter puts its receptions in the same trace; a local
//!   tag's trace id also hashes the machine and the tag's creation time,
//!   so a tag deleted and made again starts a new trace.
//! - Each reception is a span, zero-length at the reception's time: the
//!   ring records instants. Nothing in it marks the end of the work the
//!   message asked for (a reply is a reception only for `--replies`
//!   tags), and ending a span at its thread's next reception would hold
//!   every span back until then, forever for a thread that never receives
//!   again.
//! - A span's parent is the span of the reception that gave the sender
//!   the tag: the sender thread's latest reception before this one, by
//!   the machine's reception sequence on one machine and by the Lamport
//!   clock across machines (a sender's reception happened before its
//!   send, so its clock is smaller). A reception made by `set` is a root.
//!   TCP's header option names the sending process, not its thread
//!   (`tx_tid` 0): then the process's latest reception.
//! - Ids are computed alike everywhere (crate::ids): a thread's first
//!   reception of the tag has the id of (trace, host, tid) alone, later
//!   ones also hash their sequence and clock. A child whose sender's
//!   records this exporter never saw (another machine's; or its ring
//!   wrapped) names the sender thread's *first* reception as its parent:
//!   the one id it can compute. That is exact for a thread that received
//!   the tag once (a server serving one request of the trace) and names an
//!   earlier reception of the same thread otherwise (`mantle.parent` =
//!   `sender-first` says so on the span).
//! - Resource: `service.name` = the receiver's command name, `host.name`,
//!   `process.pid`, `thread.id`. Attributes: `mantle.tag`, `mantle.via`,
//!   `mantle.ttl` (hops left, -1 unlimited), `mantle.lamport`,
//!   `mantle.seq`, `mantle.sender.pid`, `.tid`, `.host`, `mantle.parent`.
//!
//! Memory: the [`Linker`] keeps the last few receptions of each thread it
//! has seen (ids for the parents of later records), up to a bound; past
//! it, it forgets everything and counts that (`forgotten`): later
//! children then name first receptions, as across machines.

use crate::ids;
use crate::proto::{int_attr, str_attr, Resource, ScopeSpans, Span, SpanKind};
use mantle_tags::ReceptionInfo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use std::collections::{BTreeMap, HashMap};

/// The trace id of a tag: of its name for a global tag (`local` None);
/// for a local tag, also of the machine and the tag's creation time.
pub fn trace_id(tag: &str, local: Option<(&str, u64)>) -> [u8; 16] {
    match local {
        None => ids::trace_id(&[b"mantle.tag.global", tag.as_bytes()]),
        Some((host, created_ns)) => ids::trace_id(&[
            b"mantle.tag.local",
            tag.as_bytes(),
            host.as_bytes(),
            &created_ns.to_le_bytes(),
        ]),
    }
}

/// The id of a thread's first reception in a trace.
fn first_id(trace: &[u8; 16], host: &str, tid: u32) -> [u8; 8] {
    ids::span_id(&[trace, b"first", host.as_bytes(), &tid.to_le_bytes()])
}

/// A reception this linker has seen: what a later child needs to find it.
#[derive(Clone, Copy)]
struct Seen {
    seq: u64,
    lamport: u64,
    id: [u8; 8],
}

/// Receptions kept per thread for finding parents: enough to tell
/// several close receptions apart when machines' records interleave.
const PER_THREAD: usize = 8;

/// Finds parents across batches of one or more lifelines.
pub struct Linker {
    /// (trace, host, tid) -> its latest receptions, oldest first.
    threads: HashMap<([u8; 16], String, u32), Vec<Seen>>,
    /// (trace, host, pid) -> the process's latest receptions.
    procs: HashMap<([u8; 16], String, u32), Vec<Seen>>,
    max_threads: usize,
    /// Times the map was cleared for being full.
    pub forgotten: u64,
    /// CLOCK_REALTIME - CLOCK_MONOTONIC, in ns: the ring's times are
    /// monotonic, OTLP's are Unix times.
    pub epoch_offset_ns: i128,
}

/// One span and the resource (receiving thread) it belongs to.
pub struct Out {
    pub resource: Res,
    pub span: Span,
}

/// The receiving thread, as an OTLP resource.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Res {
    pub service: String,
    pub host: String,
    pub pid: u32,
    pub tid: u32,
}

impl Res {
    fn to_proto(&self) -> Resource {
        Resource {
            attributes: vec![
                str_attr("service.name", &self.service),
                str_attr("host.name", &self.host),
                int_attr("process.pid", self.pid as i64),
                int_attr("thread.id", self.tid as i64),
            ],
            ..Default::default()
        }
    }
}

impl Linker {
    /// A linker keeping at most `max_threads` threads.
    pub fn new(epoch_offset_ns: i128, max_threads: usize) -> Linker {
        Linker {
            threads: HashMap::new(),
            procs: HashMap::new(),
            max_threads: max_threads.max(1),
            forgotten: 0,
            epoch_offset_ns,
        }
    }

    /// Spans of `records` (one tag's, in the order of
    /// [`mantle_tags::lifeline::merge`]: one machine's in its sequence,
    /// several by Lamport clock), in trace `trace`. Records given in an
    /// earlier call are parents for these.
    pub fn spans(&mut self, trace: [u8; 16], records: &[ReceptionInfo]) -> Vec<Out> {
        records.iter().map(|r| self.span(trace, r)).collect()
    }

    /// Remembers `r` without making its span: the backlog of a ring that
    /// was exported before (its records are parents of new ones).
    pub fn learn(&mut self, trace: [u8; 16], r: &ReceptionInfo) {
        self.span(trace, r);
    }

    fn span(&mut self, trace: [u8; 16], r: &ReceptionInfo) -> Out {
        let (parent, how) = if r.via == "set" {
            (None, "root")
        } else {
            let same_host = r.tx_host == r.host;
            // TCP's header option carries the sending process, not its
            // thread (tx_tid 0): its receptions, whichever thread.
            let found = if r.tx_tid == 0 {
                self.procs.get(&(trace, r.tx_host.clone(), r.tx_pid))
            } else {
                self.threads.get(&(trace, r.tx_host.clone(), r.tx_tid))
            };
            let found = found.and_then(|seen| {
                seen.iter()
                    .filter(|s| {
                        if same_host {
                            s.seq < r.seq
                        } else {
                            s.lamport < r.lamport
                        }
                    })
                    .max_by_key(|s| if same_host { s.seq } else { s.lamport })
                    .map(|s| s.id)
            });
            match found {
                Some(id) => (Some(id), "ring"),
                // (a process's main thread has its pid for tid)
                None => (
                    Some(first_id(
                        &trace,
                        &r.tx_host,
                        if r.tx_tid == 0 { r.tx_pid } else { r.tx_tid },
                    )),
                    "sender-first",
                ),
            }
        };
        let key = (trace, r.host.clone(), r.rx_tid);
        if !self.threads.contains_key(&key) && self.threads.len() >= self.max_threads {
            self.threads.clear();
            self.forgotten += 1;
        }
        let seen = self.threads.entry(key).or_default();
        let id = if seen.is_empty() {
            first_id(&trace, &r.host, r.rx_tid)
        } else {
            ids::span_id(&[
                &trace,
                r.host.as_bytes(),
                &r.rx_tid.to_le_bytes(),
                &r.seq.to_le_bytes(),
                &r.lamport.to_le_bytes(),
            ])
        };
        let me = Seen {
            seq: r.seq,
            lamport: r.lamport,
            id,
        };
        if seen.len() == PER_THREAD {
            seen.remove(0);
        }
        seen.push(me);
        let pkey = (trace, r.host.clone(), r.rx_pid);
        if !self.procs.contains_key(&pkey) && self.procs.len() >= self.max_threads {
            self.procs.clear();
            self.forgotten += 1;
        }
        let seen = self.procs.entry(pkey).or_default();
        if seen.len() == PER_THREAD {
            seen.remove(0);
        }
        seen.push(me);
        let t = (r.ts_ns as i128 + self.epoch_offset_ns).max(0) as u64;
        let ttl = if r.ttl == mantle_tags::abi::MT_TTL_INF as u8 {
            -1
        } else {
            r.ttl as i64
        };
        let attributes: Vec<KeyValue> = vec![
            str_attr("mantle.tag", &r.tag),
            str_attr("mantle.via", &r.via),
            int_attr("mantle.ttl", ttl),
            int_attr("mantle.lamport", r.lamport as i64),
            int_attr("mantle.seq", r.seq as i64),
            int_attr("mantle.sender.pid", r.tx_pid as i64),
            int_attr("mantle.sender.tid", r.tx_tid as i64),
            str_attr("mantle.sender.host", &r.tx_host),
            str_attr("mantle.parent", how),
        ];
        let kind = match r.via.as_str() {
            "set" | "fork" => SpanKind::Internal,
            _ => SpanKind::Consumer,
        };
        Out {
            resource: Res {
                service: r.rx_comm.clone(),
                host: r.host.clone(),
                pid: r.rx_pid,
                tid: r.rx_tid,
            },
            span: Span {
                trace_id: trace.to_vec(),
                span_id: id.to_vec(),
                parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
                name: format!("{} via {}", r.tag, r.via),
                kind: kind as i32,
                start_time_unix_nano: t,
                end_time_unix_nano: t,
                attributes,
                ..Default::default()
            },
        }
    }
}

/// The instrumentation scope of mantle's spans and metrics.
pub(crate) fn scope(name: &str) -> InstrumentationScope {
    InstrumentationScope {
        name: name.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    }
}

/// One export request of `spans`, grouped by resource.
pub fn request(spans: Vec<Out>) -> ExportTraceServiceRequest {
    let mut by: BTreeMap<Res, Vec<Span>> = BTreeMap::new();
    for o in spans {
        by.entry(o.resource).or_default().push(o.span);
    }
    ExportTraceServiceRequest {
        resource_spans: by
            .into_iter()
            .map(|(r, spans)| ResourceSpans {
                resource: Some(r.to_proto()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(scope("mantle.tags")),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(host: &str, seq: u64, lamport: u64, rx: u32, tx: u32, via: &str) -> ReceptionInfo {
        ReceptionInfo {
            seq,
            ts_ns: seq * 1000,
            tag: "t".into(),
            rx_tid: rx,
            rx_pid: rx,
            rx_comm: format!("p{rx}"),
            tx_tid: tx,
            tx_pid: tx,
            via: via.into(),
            ttl: 255,
            host: host.into(),
            tx_host: host.into(),
            lamport,
        }
    }

    fn attr<'a>(
        s: &'a Span,
        k: &str,
    ) -> &'a opentelemetry_proto::tonic::common::v1::any_value::Value {
        s.attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.as_ref())
            .and_then(|v| v.value.as_ref())
            .unwrap_or_else(|| panic!("no {k}"))
    }

    /// A chain on one machine: set, fork, pipe, unix; then the forked
    /// shell sends again after receiving a second time: that child's
    /// parent is the shell's second reception, not its first.
    #[test]
    fn parents_on_one_machine_follow_the_sequence() {
        let l = vec![
            rec("h", 1, 1, 10, 10, "set"),
            rec("h", 2, 3, 11, 10, "fork"),
            rec("h", 3, 5, 12, 11, "pipe"),
            rec("h", 4, 7, 13, 12, "unix-stream"),
            rec("h", 5, 9, 11, 13, "unix-stream"),
            rec("h", 6, 11, 14, 11, "pipe"),
        ];
        let tr = trace_id("t", Some(("h", 1)));
        let mut k = Linker::new(1_000_000, 100);
        let out = k.spans(tr, &l);
        let id = |i: usize| out[i].span.span_id.clone();
        assert!(out[0].span.parent_span_id.is_empty());
        assert_eq!(out[1].span.parent_span_id, id(0));
        assert_eq!(out[2].span.parent_span_id, id(1));
        assert_eq!(out[3].span.parent_span_id, id(2));
        assert_eq!(out[4].span.parent_span_id, id(3));
        assert_eq!(out[5].span.parent_span_id, id(4), "the latest reception");
        // ids are distinct; times are Unix times; kind and attributes
        let mut all: Vec<_> = out.iter().map(|o| o.span.span_id.clone()).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 6);
        assert_eq!(out[2].span.start_time_unix_nano, 3000 + 1_000_000);
        assert_eq!(
            out[2].span.end_time_unix_nano,
            out[2].span.start_time_unix_nano
        );
        assert_eq!(out[2].span.name, "t via pipe");
        assert_eq!(out[2].span.kind, SpanKind::Consumer as i32);
        assert_eq!(out[1].span.kind, SpanKind::Internal as i32);
        use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
        assert_eq!(
            attr(&out[2].span, "mantle.via"),
            &V::StringValue("pipe".into())
        );
        assert_eq!(attr(&out[2].span, "mantle.ttl"), &V::IntValue(-1));
        assert_eq!(attr(&out[2].span, "mantle.lamport"), &V::IntValue(5));
        assert_eq!(attr(&out[2].span, "mantle.sender.pid"), &V::IntValue(11));
        assert_eq!(
            attr(&out[2].span, "mantle.parent"),
            &V::StringValue("ring".into())
        );
        assert_eq!(out[2].resource.service, "p12");
        // The same records in two batches give the same spans.
        let mut k2 = Linker::new(1_000_000, 100);
        let mut again = k2.spans(tr, &l[..3]);
        again.extend(k2.spans(tr, &l[3..]));
        for (a, b) in out.iter().zip(&again) {
            assert_eq!(a.span, b.span);
        }
    }

    /// Two machines, each exporting its own records: the child on b
    /// names the span a's exporter gave the sender's (first) reception.
    #[test]
    fn parents_across_machines_meet() {
        let tr = trace_id("g", None);
        let a = vec![
            rec("a", 1, 1, 10, 10, "set"),
            rec("a", 2, 3, 11, 10, "pipe"),
        ];
        let mut b1 = rec("b", 1, 5, 20, 11, "tcp");
        b1.tx_host = "a".into();
        let b = vec![b1, rec("b", 2, 7, 21, 20, "pipe")];
        let sa = Linker::new(0, 10).spans(tr, &a);
        let sb = Linker::new(0, 10).spans(tr, &b);
        assert_eq!(sb[0].span.parent_span_id, sa[1].span.span_id);
        assert_eq!(sb[1].span.parent_span_id, sb[0].span.span_id);
        use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
        assert_eq!(
            attr(&sb[0].span, "mantle.parent"),
            &V::StringValue("sender-first".into())
        );
        // merged (Lamport order) in one exporter: the same ids
        let mut all = a.clone();
        all.extend(b.clone());
        let m = Linker::new(0, 10).spans(tr, &mantle_tags::lifeline::merge(vec![all]));
        assert_eq!(m[2].span.parent_span_id, sa[1].span.span_id);
        assert_eq!(m[2].span.span_id, sb[0].span.span_id);
        // TCP names the sending process, not its thread (tx_tid 0): the
        // process's latest reception is the parent
        let mut t = b[0].clone();
        t.tx_tid = 0;
        let mut k = Linker::new(0, 10);
        let sa2 = k.spans(tr, &a);
        let st = k.spans(tr, &[t]);
        assert_eq!(st[0].span.parent_span_id, sa2[1].span.span_id);
        // a global tag's trace is the same on both; a local one's is not
        assert_ne!(trace_id("g", Some(("a", 1))), trace_id("g", Some(("b", 1))));
        assert_ne!(trace_id("g", Some(("a", 1))), trace_id("g", Some(("a", 2))));
    }

    /// The linker is bounded: past its threads it forgets and says so.
    #[test]
    fn the_linker_is_bounded() {
        let mut k = Linker::new(0, 4);
        let tr = trace_id("t", None);
        let l: Vec<_> = (1..=20)
            .map(|i| rec("h", i, i, 100 + i as u32, 99 + i as u32, "pipe"))
            .collect();
        k.spans(tr, &l);
        assert!(k.threads.len() <= 4);
        assert!(k.forgotten >= 4);
    }

    #[test]
    fn request_groups_by_resource() {
        let l = vec![
            rec("h", 1, 1, 10, 10, "set"),
            rec("h", 2, 3, 11, 10, "pipe"),
            rec("h", 3, 5, 11, 10, "pipe"),
        ];
        let r = request(Linker::new(0, 10).spans(trace_id("t", None), &l));
        assert_eq!(r.resource_spans.len(), 2);
        let n: usize = r
            .resource_spans
            .iter()
            .map(|rs| rs.scope_spans[0].spans.len())
            .sum();
        assert_eq!(n, 3);
    }
}
