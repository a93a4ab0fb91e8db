//! `mantle run --trace --otlp URL`: the executive's trace as OTLP spans,
//! and `--count` as OTLP metrics.
//!
//! The trace agent (crates/exec, agents::trace) writes one JSON object per
//! ended call; here a writer takes those lines in the executive's process
//! and turns each into a span (name = the call; attributes = the decoded
//! arguments, the result or errno, the chain's decision, a performed
//! call's path, the kernel's and the executive's time). The executive's
//! thread only parses and queues; a sender thread, started in the
//! executive's process at its first span, posts batches ([`crate::queue`]:
//! bounded, retried, drops counted).
//!
//! Shape of a run's trace (one trace per `mantle run`): a root span
//! `mantle run` covering the run; a span per guest process (name = its
//! command, children of the process that forked it, if seen, else of the
//! root), sent at the end with the time between the process's first and
//! last call, named by its command as last read; each call a child of its process. A call's time is when its
//! line was written (its end) minus the executive's and the kernel's time:
//! the trace line carries durations, not times.
//!
//! The line says the calling thread, not its process: the process is read
//! from /proc once per thread (a thread gone before then counts as its own
//! process, tid = pid).

use crate::http::{self, Endpoint};
use crate::ids;
use crate::lifeline::scope;
use crate::proto::{int_attr, str_attr, AnyValue, KeyValue, Resource, ScopeSpans, Span, SpanKind};
use crate::queue::{Policy, Queue, Stats};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, ArrayValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, ResourceSpans, Status};
use prost::Message;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A guest process seen in the trace.
#[derive(Clone)]
struct Proc {
    guest: String,
    comm: String,
    ppid: u32,
    first_ns: u64,
    last_ns: u64,
    /// When its name was last read.
    comm_read_ns: u64,
}

/// A span waiting to be sent and its guest (the resource's service).
struct Item {
    guest: String,
    pid: u32,
    span: Span,
}

struct State {
    queue: Queue<Item>,
    /// tid -> pid
    pids: HashMap<u32, u32>,
    procs: BTreeMap<u32, Proc>,
    sender: Option<std::thread::JoinHandle<()>>,
    /// Calls let go because the process table was full.
    forgotten: u64,
    done: bool,
    /// Lines that were not a trace object.
    bad_lines: u64,
}

/// The most processes and threads remembered.
const MAX_PROCS: usize = 65536;

/// One run's export.
#[derive(Clone)]
pub struct ExecExport {
    shared: Arc<(Mutex<State>, Condvar)>,
    ep: Endpoint,
    timeout: Duration,
    trace: [u8; 16],
    root: [u8; 8],
    start_ns: u64,
    host: String,
    name: String,
}

/// What an export did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ExecReport {
    pub spans: Stats,
    pub metric_points: u64,
    /// The collector's last error, if the end found it failing.
    pub failing: Option<String>,
    pub bad_lines: u64,
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl ExecExport {
    /// An export for a run named `name` (the command, or the system
    /// file).
    pub fn new(ep: Endpoint, timeout: Duration, name: &str) -> ExecExport {
        let start_ns = now_unix_ns();
        let host = mantle_sys::os::hostname();
        let pid = std::process::id();
        let trace = ids::trace_id(&[
            b"mantle.run",
            host.as_bytes(),
            &pid.to_le_bytes(),
            &start_ns.to_le_bytes(),
        ]);
        ExecExport {
            shared: Arc::new((
                Mutex::new(State {
                    queue: Queue::new(Policy {
                        flush: Duration::from_millis(500),
                        ..Policy::default()
                    }),
                    pids: HashMap::new(),
                    procs: BTreeMap::new(),
                    sender: None,
                    forgotten: 0,
                    done: false,
                    bad_lines: 0,
                }),
                Condvar::new(),
            )),
            root: ids::span_id(&[&trace, b"root"]),
            trace,
            ep,
            timeout,
            start_ns,
            host,
            name: name.to_string(),
        }
    }

    /// The trace's id (lower-case hex), to tell the user.
    pub fn trace_id_hex(&self) -> String {
        ids::hex(&self.trace)
    }

    fn proc_span_id(&self, pid: u32) -> [u8; 8] {
        ids::span_id(&[&self.trace, b"process", &pid.to_le_bytes()])
    }

    /// A writer for guest `guest`'s trace lines (JSON, one per line).
    pub fn writer(&self, guest: &str) -> Box<dyn Write + Send> {
        Box::new(LineSink {
            ex: self.clone(),
            guest: guest.to_string(),
            buf: Vec::new(),
        })
    }

    /// Takes one trace line of `guest`, written at `end_ns` (Unix ns).
    fn line(&self, guest: &str, line: &[u8], end_ns: u64) {
        let v: Value = match serde_json::from_slice(line) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                self.state().bad_lines += 1;
                return;
            }
        };
        let tid = v["tid"].as_u64().unwrap_or(0) as u32;
        let dur = v["executive_ns"].as_u64().unwrap_or(0) + v["kernel_ns"].as_u64().unwrap_or(0);
        let start = end_ns.saturating_sub(dur);
        let mut st = self.state();
        let pid = match st.pids.get(&tid) {
            Some(p) => *p,
            None => {
                let (pid, ppid, comm) = proc_of(tid);
                if st.pids.len() >= MAX_PROCS {
                    st.pids.clear();
                    st.forgotten += 1;
                }
                st.pids.insert(tid, pid);
                if !st.procs.contains_key(&pid) && st.procs.len() < MAX_PROCS {
                    st.procs.insert(
                        pid,
                        Proc {
                            guest: guest.to_string(),
                            comm,
                            ppid,
                            first_ns: start,
                            last_ns: end_ns,
                            comm_read_ns: end_ns,
                        },
                    );
                }
                pid
            }
        };
        if let Some(p) = st.procs.get_mut(&pid) {
            p.first_ns = p.first_ns.min(start);
            p.last_ns = p.last_ns.max(end_ns);
            // A process execs after its first calls (the guest starts as
            // a copy of mantle; sh forks before it runs cat): its name is
            // read again, at most once per 200 us (a /proc read, a few
            // microseconds, on the executive's thread).
            if end_ns.saturating_sub(p.comm_read_ns) >= 200_000 {
                p.comm_read_ns = end_ns;
                if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                    p.comm = c.trim_end().to_string();
                }
            }
        }
        let span = call_span(&v, self.trace, self.proc_span_id(pid), tid, start, end_ns);
        st.queue.push(
            Instant::now(),
            Item {
                guest: guest.to_string(),
                pid,
                span,
            },
        );
        if st.sender.is_none() && !st.done {
            let me = self.clone();
            st.sender = std::thread::Builder::new()
                .name("otlp-send".into())
                .spawn(move || me.send_loop())
                .ok();
        }
        self.shared.1.notify_one();
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn request(&self, items: &[&Item]) -> ExportTraceServiceRequest {
        let mut by: BTreeMap<(String, u32), Vec<Span>> = BTreeMap::new();
        for i in items {
            by.entry((i.guest.clone(), i.pid))
                .or_default()
                .push(i.span.clone());
        }
        ExportTraceServiceRequest {
            resource_spans: by
                .into_iter()
                .map(|((guest, pid), spans)| ResourceSpans {
                    resource: Some(self.resource(&guest, Some(pid))),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(scope("mantle.exec")),
                        spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn resource(&self, guest: &str, pid: Option<u32>) -> Resource {
        let mut attributes = vec![
            str_attr("service.name", guest),
            str_attr("host.name", &self.host),
        ];
        if let Some(p) = pid {
            attributes.push(int_attr("process.pid", p as i64));
        }
        Resource {
            attributes,
            ..Default::default()
        }
    }

    /// The sender thread: batches as they are due, until the end.
    fn send_loop(&self) {
        let (m, cv) = &*self.shared;
        loop {
            let (n, body) = {
                let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let now = Instant::now();
                    g.queue.expire(now);
                    let done = g.done;
                    if let Some(b) = g.queue.due(now, done) {
                        let n = b.len();
                        break (n, self.request(&b).encode_to_vec());
                    }
                    if done && g.queue.next_try().is_none() {
                        return;
                    }
                    let wait = g
                        .queue
                        .next_try()
                        .map(|t| t.saturating_duration_since(now))
                        .unwrap_or(Duration::from_millis(100))
                        .clamp(Duration::from_millis(1), Duration::from_millis(100));
                    g = cv
                        .wait_timeout(g, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            };
            let r = http::post(&self.ep, "/v1/traces", &body, self.timeout);
            let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
            match r {
                Ok(_) => g.queue.sent(n),
                Err(f) => {
                    g.queue
                        .failed(Instant::now(), n, f.retryable(), f.to_string());
                    if g.done {
                        // the end, and the collector fails: no waiting
                        g.queue.drop_all();
                        return;
                    }
                }
            }
        }
    }

    /// Ends the export: the root and process spans, what is queued (one
    /// more try each within the timeout), then the counts of each guest
    /// (`--count`'s summaries as JSON, mantle_exec's CountSummary) as
    /// metrics.
    pub fn finish(&self, counts: &[(String, Value)]) -> ExecReport {
        let end = now_unix_ns();
        {
            let mut st = self.state();
            let procs = st.procs.clone();
            let now = Instant::now();
            let mut root = Span {
                trace_id: self.trace.to_vec(),
                span_id: self.root.to_vec(),
                name: format!("mantle run {}", self.name),
                kind: SpanKind::Internal as i32,
                start_time_unix_nano: self.start_ns,
                end_time_unix_nano: end,
                ..Default::default()
            };
            root.attributes
                .push(int_attr("process.pid", std::process::id() as i64));
            st.queue.push(
                now,
                Item {
                    guest: self.name.clone(),
                    pid: std::process::id(),
                    span: root,
                },
            );
            for (pid, p) in &procs {
                let parent = if procs.contains_key(&p.ppid) {
                    self.proc_span_id(p.ppid)
                } else {
                    self.root
                };
                st.queue.push(
                    now,
                    Item {
                        guest: p.guest.clone(),
                        pid: *pid,
                        span: Span {
                            trace_id: self.trace.to_vec(),
                            span_id: self.proc_span_id(*pid).to_vec(),
                            parent_span_id: parent.to_vec(),
                            name: p.comm.clone(),
                            kind: SpanKind::Internal as i32,
                            start_time_unix_nano: p.first_ns,
                            end_time_unix_nano: p.last_ns,
                            attributes: vec![
                                int_attr("process.pid", *pid as i64),
                                int_attr("process.parent_pid", p.ppid as i64),
                                str_attr("mantle.guest", &p.guest),
                            ],
                            ..Default::default()
                        },
                    },
                );
            }
            st.done = true;
            if st.sender.is_none() {
                let me = self.clone();
                st.sender = std::thread::Builder::new()
                    .name("otlp-send".into())
                    .spawn(move || me.send_loop())
                    .ok();
            }
        }
        self.shared.1.notify_all();
        let h = self.state().sender.take();
        if let Some(h) = h {
            let _ = h.join();
        }
        let mut report = {
            let mut st = self.state();
            st.queue.drop_all();
            ExecReport {
                spans: st.queue.stats,
                metric_points: 0,
                failing: st.queue.failing.clone(),
                bad_lines: st.bad_lines,
            }
        };
        if !counts.is_empty() {
            let req = self.metrics(counts, end);
            let points = req
                .resource_metrics
                .iter()
                .flat_map(|r| &r.scope_metrics)
                .flat_map(|s| &s.metrics)
                .map(|m| match &m.data {
                    Some(metric::Data::Sum(s)) => s.data_points.len() as u64,
                    _ => 0,
                })
                .sum();
            match http::post(&self.ep, "/v1/metrics", &req.encode_to_vec(), self.timeout) {
                Ok(_) => report.metric_points = points,
                Err(f) => report.failing = Some(format!("metrics: {f}")),
            }
        }
        report
    }

    /// `--count` as cumulative sums per call.
    pub fn metrics(&self, counts: &[(String, Value)], end: u64) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: counts
                .iter()
                .map(|(guest, summary)| ResourceMetrics {
                    resource: Some(self.resource(guest, None)),
                    scope_metrics: vec![ScopeMetrics {
                        scope: Some(scope("mantle.exec")),
                        metrics: count_metrics(summary, self.start_ns, end),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .collect(),
        }
    }
}

/// The metrics of one guest's count summary.
fn count_metrics(summary: &Value, start: u64, end: u64) -> Vec<Metric> {
    let rows = summary["rows"].as_array().cloned().unwrap_or_default();
    let sum = |name: &str, unit: &str, desc: &str, field: &str| Metric {
        name: name.to_string(),
        unit: unit.to_string(),
        description: desc.to_string(),
        data: Some(metric::Data::Sum(Sum {
            data_points: rows
                .iter()
                .map(|r| NumberDataPoint {
                    attributes: vec![str_attr("mantle.call", r["call"].as_str().unwrap_or("?"))],
                    start_time_unix_nano: start,
                    time_unix_nano: end,
                    value: Some(number_data_point::Value::AsInt(
                        r[field].as_u64().unwrap_or(0) as i64,
                    )),
                    ..Default::default()
                })
                .collect(),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    };
    vec![
        sum("mantle.exec.calls", "{call}", "interposed calls", "calls"),
        sum(
            "mantle.exec.errors",
            "{call}",
            "interposed calls that failed",
            "errors",
        ),
        sum(
            "mantle.exec.executive_time",
            "ns",
            "time in the executive",
            "executive_ns",
        ),
        sum(
            "mantle.exec.kernel_time",
            "ns",
            "time in the kernel for calls the executive made",
            "kernel_ns",
        ),
    ]
}

/// The span of one trace line.
fn call_span(v: &Value, trace: [u8; 16], parent: [u8; 8], tid: u32, start: u64, end: u64) -> Span {
    let call = v["call"].as_str().unwrap_or("?").to_string();
    let mut attributes: Vec<KeyValue> = vec![
        int_attr("thread.id", tid as i64),
        int_attr("mantle.call.nr", v["nr"].as_i64().unwrap_or(-1)),
        KeyValue {
            key: "mantle.args".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue {
                    values: v["decoded"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| AnyValue {
                            value: Some(any_value::Value::StringValue(
                                a.as_str().unwrap_or("").to_string(),
                            )),
                        })
                        .collect(),
                })),
            }),
            ..Default::default()
        },
        str_attr("mantle.decision", v["decision"].as_str().unwrap_or("?")),
        int_attr(
            "mantle.executive_ns",
            v["executive_ns"].as_i64().unwrap_or(0),
        ),
        int_attr("mantle.kernel_ns", v["kernel_ns"].as_i64().unwrap_or(0)),
    ];
    if let Some(r) = v["result"].as_i64() {
        attributes.push(int_attr("mantle.result", r));
    }
    if let Some(p) = v["path"].as_str() {
        attributes.push(str_attr("mantle.path", p));
    }
    let error = v["error"].as_str().map(str::to_string);
    if let Some(e) = &error {
        attributes.push(str_attr("mantle.errno", e));
    }
    // the span id: the call's place in the trace (thread, end time, call)
    let id = ids::span_id(&[
        &trace,
        b"call",
        &tid.to_le_bytes(),
        &end.to_le_bytes(),
        call.as_bytes(),
        &start.to_le_bytes(),
    ]);
    Span {
        trace_id: trace.to_vec(),
        span_id: id.to_vec(),
        parent_span_id: parent.to_vec(),
        name: call,
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes,
        status: error.map(|e| Status {
            message: e,
            code: StatusCode::Error as i32,
        }),
        ..Default::default()
    }
}

/// (pid, parent pid, command) of a thread, from /proc; a thread gone
/// already counts as its own process.
fn proc_of(tid: u32) -> (u32, u32, String) {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
    };
    let pid = field("Tgid:").and_then(|v| v.parse().ok()).unwrap_or(tid);
    let ppid = field("PPid:").and_then(|v| v.parse().ok()).unwrap_or(0);
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .ok()
        .or_else(|| field("Name:"))
        .unwrap_or_else(|| format!("pid {pid}"));
    (pid, ppid, comm)
}

/// The trace agent's writer: splits lines, each to [`ExecExport::line`].
struct LineSink {
    ex: ExecExport,
    guest: String,
    buf: Vec<u8>,
}

impl Write for LineSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        while let Some(i) = self.buf.iter().position(|c| *c == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=i).collect();
            self.ex.line(&self.guest, &line[..i], now_unix_ns());
        }
        if self.buf.len() > 1 << 20 {
            // a line longer than any the trace writes: not ours
            self.buf.clear();
            self.ex.state().bad_lines += 1;
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_line_becomes_a_span() {
        let v: Value = serde_json::from_str(
            r#"{"tid":7,"call":"unlink","nr":87,"args":[1,0,0,0,0,0],"decoded":["\"/tmp/x\""],
                "decision":"fail","path":null,"result":-13,"error":"EACCES","kernel_ns":0,"executive_ns":800}"#,
        )
        .unwrap();
        let s = call_span(&v, [1; 16], [2; 8], 7, 1000, 1800);
        assert_eq!(s.name, "unlink");
        assert_eq!(s.parent_span_id, vec![2; 8]);
        assert_eq!((s.start_time_unix_nano, s.end_time_unix_nano), (1000, 1800));
        assert_eq!(s.status.as_ref().unwrap().code, StatusCode::Error as i32);
        let get = |k: &str| {
            s.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.clone())
                .and_then(|v| v.value)
        };
        assert_eq!(get("mantle.result"), Some(any_value::Value::IntValue(-13)));
        assert_eq!(
            get("mantle.decision"),
            Some(any_value::Value::StringValue("fail".into()))
        );
        assert_eq!(
            get("mantle.errno"),
            Some(any_value::Value::StringValue("EACCES".into()))
        );
        match get("mantle.args") {
            Some(any_value::Value::ArrayValue(a)) => assert_eq!(a.values.len(), 1),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn counts_become_cumulative_sums() {
        let summary = serde_json::json!({"rows": [
            {"call": "openat", "calls": 5, "errors": 1, "executive_ns": 900, "kernel_ns": 0},
            {"call": "read", "calls": 2, "errors": 0, "executive_ns": 100, "kernel_ns": 10}
        ]});
        let m = count_metrics(&summary, 1, 2);
        assert_eq!(m.len(), 4);
        let Some(metric::Data::Sum(s)) = &m[0].data else {
            panic!()
        };
        assert!(s.is_monotonic);
        assert_eq!(s.data_points.len(), 2);
        assert_eq!(
            s.data_points[0].value,
            Some(number_data_point::Value::AsInt(5))
        );
    }
}
