//! OpenTelemetry out of mantle (docs/otel.md), end to end: lifelines and
//! executive traces sent to a small OTLP receiver in this test (decoded
//! with opentelemetry-proto, so parents, attributes and resources are
//! checked exactly) and to a real Jaeger v2 (scripts/setup.sh builds it),
//! asked back through its query API.
//!
//! The tagged pipelines write to files, never to a pipe this process
//! reads: the test process must never be tagged.

use mantle_testsupport::cli::{lifeline, mantle, mantle_as};
use mantle_testsupport::kernel::{self, Spec};
use mantle_testsupport::{poll_until_for, require_root};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");
const NOBODY: u32 = 65534;
const SPEC: Spec = Spec {
    name: "otel-test",
    actors: &[],
};

// ---------------------------------------------------------------------
// The in-test OTLP/HTTP receiver

const OK: u8 = 0;
const UNAVAILABLE: u8 = 1;
const SILENT: u8 = 2;

/// Requests received: (path, body).
type Got = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A collector on a loopback port: records every request (path, body)
/// and answers 200, 503 or nothing, as `mode` says.
struct Receiver {
    port: u16,
    got: Got,
    mode: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    fn start(mode: u8) -> Receiver {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let r = Receiver {
            port,
            got: Arc::default(),
            mode: Arc::new(AtomicU8::new(mode)),
            stop: Arc::default(),
        };
        let (got, m, stop) = (r.got.clone(), r.mode.clone(), r.stop.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(c) = c else { continue };
                let (got, m, stop) = (got.clone(), m.clone(), stop.clone());
                std::thread::spawn(move || serve(c, &got, &m, &stop));
            }
        });
        r
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn traces(&self) -> Vec<ExportTraceServiceRequest> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == "/v1/traces")
            .map(|(_, b)| ExportTraceServiceRequest::decode(&b[..]).expect("a trace request"))
            .collect()
    }

    fn metrics(&self) -> Vec<ExportMetricsServiceRequest> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == "/v1/metrics")
            .map(|(_, b)| ExportMetricsServiceRequest::decode(&b[..]).expect("a metrics request"))
            .collect()
    }

    /// Every span received, with its resource's attributes.
    fn spans(&self) -> Vec<(Vec<KeyValue>, Span)> {
        let mut out = Vec::new();
        for req in self.traces() {
            for rs in req.resource_spans {
                let res = rs.resource.map(|r| r.attributes).unwrap_or_default();
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        out.push((res.clone(), s));
                    }
                }
            }
        }
        out
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(mut c: TcpStream, got: &Mutex<Vec<(String, Vec<u8>)>>, m: &AtomicU8, stop: &AtomicBool) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let (path, body) = loop {
        let Ok(n) = c.read(&mut chunk) else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        if buf.len() >= end + 4 + len {
            let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
            break (path, buf[end + 4..end + 4 + len].to_vec());
        }
    };
    match m.load(Ordering::SeqCst) {
        SILENT => {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        UNAVAILABLE => {
            let _ = c.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy",
            );
        }
        _ => {
            got.lock().unwrap().push((path, body));
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    }
}

fn attr<'a>(kv: &'a [KeyValue], k: &str) -> Option<&'a V> {
    kv.iter()
        .find(|a| a.key == k)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn int(kv: &[KeyValue], k: &str) -> i64 {
    match attr(kv, k) {
        Some(V::IntValue(i)) => *i,
        o => panic!("{k}: {o:?}"),
    }
}

fn string(kv: &[KeyValue], k: &str) -> String {
    match attr(kv, k) {
        Some(V::StringValue(s)) => s.clone(),
        o => panic!("{k}: {o:?}"),
    }
}

// ---------------------------------------------------------------------
// The demo's pipeline

/// A tag with a lifeline, deleted at the end.
struct Tag(String);

impl Tag {
    fn new(what: &str) -> Tag {
        let name = format!("otel-{what}-{}", std::process::id());
        let o = mantle(&["tag", "create", &name, "--lifeline", "4096"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        Tag(name)
    }
}

impl Drop for Tag {
    fn drop(&mut self) {
        let _ = mantle(&["tag", "delete", &self.0]);
    }
}

/// The README's demo: an untagged socat server running `tr`, and `printf
/// | sed | socat` holding the tag; output to a file.
fn demo_pipeline(tag: &str, dir: &Path) {
    let sock = dir.join(format!("{tag}.sock"));
    let mut server = Command::new("socat")
        .args([
            &format!("UNIX-LISTEN:{},fork", sock.display()),
            "SYSTEM:tr a-z A-Z",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("socat (scripts/setup.sh installs it)");
    poll_until_for(Duration::from_secs(10), || sock.exists().then_some(()))
        .expect("the socat server listens");
    let out = std::fs::File::create(dir.join(format!("{tag}.out"))).unwrap();
    let pipeline = format!(
        "printf 'hello\\n' | sed 's/hello/HELLO/' | socat -t 2 - UNIX-CONNECT:{}",
        sock.display()
    );
    let st = Command::new(MANTLE)
        .args(["tag", "run", tag, "--", "sh", "-c", &pipeline])
        .stdout(out)
        .stderr(Stdio::null())
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "the pipeline: {st}");
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(dir.join(format!("{tag}.out")));
}

/// A few tagged receptions (set, fork, pipe) without a server.
fn small_pipeline(tag: &str) {
    let st = Command::new(MANTLE)
        .args([
            "tag",
            "run",
            tag,
            "--",
            "sh",
            "-c",
            "echo x | cat > /dev/null",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
}

/// The parent each record should have: the span of the sender thread's
/// latest reception before it (one machine: by sequence); none for `set`.
fn expected_parents(l: &[Value]) -> Vec<Option<usize>> {
    l.iter()
        .enumerate()
        .map(|(i, r)| {
            if r["via"] == "set" {
                return None;
            }
            (0..i)
                .rev()
                .find(|&j| l[j]["rx_tid"] == r["tx_tid"] && l[j]["host"] == r["tx_host"])
        })
        .collect()
}

#[test]
#[ignore = "needs root: the tags kernel side"]
fn lifeline_to_a_receiver_has_exact_parents_attributes_and_resources() {
    require_root("sending a lifeline");
    let k = kernel::loaded(&SPEC);
    let tag = Tag::new("rx");
    demo_pipeline(&tag.0, &k.dir);
    let l = lifeline(&tag.0);
    let rx = Receiver::start(OK);
    let o = mantle(&["tag", "lifeline", &tag.0, "--otlp", &rx.url()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(&format!("sent {} span(s)", l.len())),
        "{}",
        o.stdout
    );
    let spans = rx.spans();
    assert_eq!(spans.len(), l.len(), "a span per reception");
    // by sequence number
    let by_seq: BTreeMap<i64, &(Vec<KeyValue>, Span)> = spans
        .iter()
        .map(|s| (int(&s.1.attributes, "mantle.seq"), s))
        .collect();
    let trace = &spans[0].1.trace_id;
    let parents = expected_parents(&l);
    let mut comms = Vec::new();
    for (i, r) in l.iter().enumerate() {
        let (res, s) = by_seq[&(r["seq"].as_i64().unwrap())];
        assert_eq!(&s.trace_id, trace, "one tag, one trace");
        // resource: the receiving thread
        assert_eq!(string(res, "service.name"), r["rx_comm"].as_str().unwrap());
        assert_eq!(string(res, "host.name"), r["host"].as_str().unwrap());
        assert_eq!(int(res, "process.pid"), r["rx_pid"].as_i64().unwrap());
        assert_eq!(int(res, "thread.id"), r["rx_tid"].as_i64().unwrap());
        // attributes
        let a = &s.attributes;
        assert_eq!(string(a, "mantle.via"), r["via"].as_str().unwrap());
        assert_eq!(string(a, "mantle.tag"), tag.0);
        assert_eq!(int(a, "mantle.lamport"), r["lamport"].as_i64().unwrap());
        assert_eq!(int(a, "mantle.ttl"), r["ttl"].as_i64().unwrap_or(-1));
        assert_eq!(int(a, "mantle.sender.pid"), r["tx_pid"].as_i64().unwrap());
        assert_eq!(int(a, "mantle.sender.tid"), r["tx_tid"].as_i64().unwrap());
        assert_eq!(
            string(a, "mantle.sender.host"),
            r["tx_host"].as_str().unwrap()
        );
        assert_eq!(
            s.name,
            format!("{} via {}", tag.0, r["via"].as_str().unwrap())
        );
        assert_eq!(s.start_time_unix_nano, s.end_time_unix_nano, "zero-length");
        // the parent: the sender's latest reception
        match parents[i] {
            None if r["via"] == "set" => assert!(s.parent_span_id.is_empty(), "{r}"),
            None => panic!("no reception of the sender in the ring: {r}"),
            Some(j) => {
                let (_, p) = by_seq[&(l[j]["seq"].as_i64().unwrap())];
                assert_eq!(s.parent_span_id, p.span_id, "parent of {r} is {}", l[j]);
                assert_eq!(string(a, "mantle.parent"), "ring");
            }
        }
        comms.push(r["rx_comm"].as_str().unwrap().to_string());
    }
    // every process of the demo is a span
    for want in ["sh", "sed", "socat", "tr"] {
        assert!(comms.iter().any(|c| c == want), "{want} in {comms:?}");
    }
    let vias: Vec<&str> = l.iter().map(|r| r["via"].as_str().unwrap()).collect();
    for want in ["set", "fork", "pipe", "unix-stream"] {
        assert!(vias.contains(&want), "{want} in {vias:?}");
    }
}

#[test]
#[ignore = "needs root: the tags kernel side"]
fn a_collector_that_does_not_answer_fails_within_the_timeout() {
    require_root("sending a lifeline");
    kernel::loaded(&SPEC);
    let tag = Tag::new("silent");
    small_pipeline(&tag.0);
    // answers nothing: the timeout
    let rx = Receiver::start(SILENT);
    let t = Instant::now();
    let o = mantle(&[
        "tag",
        "lifeline",
        &tag.0,
        "--otlp",
        &rx.url(),
        "--timeout",
        "1s",
    ]);
    let took = t.elapsed();
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr.contains("no answer within the timeout"),
        "{}",
        o.stderr
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
    // nothing listens: refused at once
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let o = mantle(&[
        "tag",
        "lifeline",
        &tag.0,
        "--otlp",
        &format!("http://127.0.0.1:{port}"),
    ]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr.starts_with("mantle: OTLP export to "),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("cannot connect"), "{}", o.stderr);
    // a malformed URL is a usage error
    for bad in ["localhost:4318", "https://x:4318", "http://x:0"] {
        let o = mantle(&["tag", "lifeline", &tag.0, "--otlp", bad]);
        assert_eq!(o.code, 2, "{bad}: {o:?}");
    }
}

#[test]
#[ignore = "needs root: the tags kernel side"]
fn tags_export_as_nobody_is_refused() {
    require_root("the kernel side");
    kernel::loaded(&SPEC);
    let tag = Tag::new("nobody");
    let rx = Receiver::start(OK);
    for args in [
        vec!["tags", "export", "--otlp", &rx.url()],
        vec!["tags", "export", "--otlp", &rx.url(), "--tags", &tag.0],
    ] {
        let o = mantle_as(Some(NOBODY), &args);
        assert_eq!(o.code, 4, "{args:?}: {o:?}");
        assert!(o.stderr.contains("needs root"), "{}", o.stderr);
    }
    assert!(rx.got.lock().unwrap().is_empty());
    // as root, a tag that does not exist is "not found"
    let o = mantle(&[
        "tags",
        "export",
        "--otlp",
        &rx.url(),
        "--tags",
        "otel-no-such-tag",
    ]);
    assert_eq!(o.code, 5, "{o:?}");
}

/// A running `mantle tags export`.
struct Export {
    child: Child,
    stderr: PathBuf,
}

impl Export {
    fn start(dir: &Path, url: &str, extra: &[&str]) -> Export {
        let stderr = dir.join(format!("export-{}.err", rand_suffix()));
        let child = Command::new(MANTLE)
            .args(["tags", "export", "--otlp", url, "--poll", "100ms", "--json"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Export { child, stderr }
    }

    /// SIGTERM, then the final report.
    fn stop(mut self) -> (Value, String) {
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let st = self.child.wait().unwrap();
        let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stderr);
        assert!(st.success(), "tags export: {st}: {err}");
        (
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?} {err}")),
            err,
        )
    }
}

fn keys(v: &Value) -> std::collections::BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// The keys docs/json.md lists under `### kind`.
fn documented_keys(kind: &str) -> std::collections::BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/json.md"))
        .unwrap();
    let sub = doc
        .split("\n### ")
        .find(|s| s.lines().next() == Some(kind))
        .unwrap_or_else(|| panic!("docs/json.md has no {kind}"));
    sub.lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(String::from)
        .collect()
}

fn rand_suffix() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[test]
#[ignore = "needs root: the tags kernel side"]
fn tags_export_retries_while_the_collector_is_unavailable_and_counts_what_it_drops() {
    require_root("the kernel side");
    let k = kernel::loaded(&SPEC);
    let tag = Tag::new("retry");
    // Unavailable (503) for a while, then taking everything: nothing lost.
    let rx = Receiver::start(UNAVAILABLE);
    let ex = Export::start(&k.dir, &rx.url(), &["--tags", &tag.0]);
    for _ in 0..5 {
        small_pipeline(&tag.0);
    }
    std::thread::sleep(Duration::from_secs(2));
    rx.mode.store(OK, Ordering::SeqCst);
    for _ in 0..5 {
        small_pipeline(&tag.0);
    }
    let n = lifeline(&tag.0).len();
    poll_until_for(Duration::from_secs(30), || {
        (rx.spans().len() >= n).then_some(())
    })
    .unwrap_or_else(|| panic!("{} of {n} spans", rx.spans().len()));
    let (r, err) = ex.stop();
    assert_eq!(rx.spans().len(), n, "each reception once");
    // the report's keys are docs/json.md's
    assert_eq!(keys(&r), documented_keys("tags export report"), "{r}");
    assert_eq!(keys(&r["queue"]), documented_keys("export queue"), "{r}");
    assert_eq!(r["queue"]["sent"], n as u64, "{r}");
    assert_eq!(r["queue"]["dropped_expired"], 0, "{r}");
    assert!(r["queue"]["failures"].as_u64().unwrap() >= 1, "{r}");
    assert!(
        err.contains("the collector fails: HTTP status 503"),
        "{err}"
    );
    assert!(err.contains("takes spans again"), "{err}");

    // Unavailable beyond the retry window: dropped, counted, said.
    let tag2 = Tag::new("drop");
    let rx2 = Receiver::start(UNAVAILABLE);
    let ex = Export::start(
        &k.dir,
        &rx2.url(),
        &["--tags", &tag2.0, "--retry-window", "1s"],
    );
    small_pipeline(&tag2.0);
    let n2 = lifeline(&tag2.0).len() as u64;
    std::thread::sleep(Duration::from_secs(4));
    let (r, err) = ex.stop();
    assert_eq!(r["queue"]["sent"], 0, "{r}");
    assert_eq!(r["queue"]["dropped_expired"], n2, "{r}");
    assert!(err.contains(&format!("dropped {n2} span(s)")), "{err}");
}

#[test]
#[ignore = "needs root: the tags kernel side"]
fn a_slow_collector_keeps_the_exporters_memory_bounded() {
    require_root("the kernel side");
    let k = kernel::loaded(&SPEC);
    let tag = Tag::new("slow");
    let rx = Receiver::start(SILENT);
    let ex = Export::start(
        &k.dir,
        &rx.url(),
        &["--tags", &tag.0, "--max-queue", "8", "--timeout", "30s"],
    );
    for _ in 0..6 {
        small_pipeline(&tag.0);
    }
    let n = lifeline(&tag.0).len() as u64;
    std::thread::sleep(Duration::from_millis(800));
    let (r, err) = ex.stop();
    assert!(n > 8, "{n} receptions");
    assert_eq!(r["queue"]["peak"], 8, "{r}");
    assert!(r["queue"]["dropped_full"].as_u64().unwrap() >= n - 8, "{r}");
    assert!(err.contains("queue full"), "{err}");
}

#[test]
fn run_trace_and_count_go_out_as_spans_and_metrics() {
    let rx = Receiver::start(OK);
    let o = mantle(&[
        "run",
        "--trace=openat,close",
        "--count",
        "--otlp",
        &rx.url(),
        "--",
        "sh",
        "-c",
        "cat /etc/hostname > /dev/null; true",
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stderr.contains("span(s) sent, 0 dropped"), "{}", o.stderr);
    assert!(
        !o.stderr.contains("openat("),
        "the trace is not printed: {}",
        o.stderr
    );
    let spans = rx.spans();
    let by_id: BTreeMap<Vec<u8>, &Span> =
        spans.iter().map(|(_, s)| (s.span_id.clone(), s)).collect();
    let root: Vec<_> = spans
        .iter()
        .filter(|(_, s)| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(root.len(), 1, "one root");
    assert!(
        root[0].1.name.starts_with("mantle run sh"),
        "{}",
        root[0].1.name
    );
    let calls: Vec<_> = spans.iter().filter(|(_, s)| s.name == "openat").collect();
    assert!(!calls.is_empty());
    for (res, s) in &calls {
        // under its process's span, which names the command
        let p = by_id.get(&s.parent_span_id).expect("the process span");
        assert_eq!(int(&p.attributes, "process.pid"), int(res, "process.pid"));
        assert!(["sh", "cat"].contains(&p.name.as_str()), "{}", p.name);
        assert!(matches!(
            attr(&s.attributes, "mantle.args"),
            Some(V::ArrayValue(_))
        ));
        assert_eq!(string(&s.attributes, "mantle.decision"), "continue");
        assert_eq!(string(res, "service.name"), "sh");
    }
    // cat's process span is a child of sh's
    let cat = spans
        .iter()
        .find(|(_, s)| s.name == "cat")
        .expect("cat's span");
    let parent = by_id.get(&cat.1.parent_span_id).expect("its parent");
    assert_eq!(parent.name, "sh");
    // --count: cumulative sums per call
    let m = rx.metrics();
    assert_eq!(m.len(), 1);
    let names: Vec<_> = m[0].resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .map(|x| x.name.clone())
        .collect();
    assert!(
        names.contains(&"mantle.exec.calls".to_string()),
        "{names:?}"
    );
}

#[path = "otel/jaeger.rs"]
mod jaeger;
use jaeger::{jaeger_for, jtag, Jaeger};

#[test]
#[ignore = "needs root: the tags kernel side; and Jaeger (scripts/setup.sh)"]
fn the_demo_in_jaeger() {
    require_root("the kernel side");
    let k = kernel::loaded(&SPEC);
    let j = jaeger_for("the_demo_in_jaeger");
    let tag = Tag::new("jaeger");
    demo_pipeline(&tag.0, &k.dir);
    let l = lifeline(&tag.0);
    let o = mantle(&["tag", "lifeline", &tag.0, "--otlp", &j.url()]);
    assert_eq!(o.code, 0, "{o:?}");
    let id = o
        .stdout
        .split("(trace ")
        .nth(1)
        .unwrap()
        .trim_end()
        .trim_end_matches(')')
        .to_string();
    let t = poll_until_for(Duration::from_secs(20), || {
        j.trace(&id)
            .filter(|t| t["spans"].as_array().map_or(0, |s| s.len()) == l.len())
    })
    .unwrap_or_else(|| {
        panic!(
            "Jaeger has not the trace {id} with {} spans: {:?}",
            l.len(),
            j.trace(&id)
        )
    });
    // Jaeger's view: every reception a span, with its process (service,
    // host), its via and its parent (a CHILD_OF reference).
    let spans = t["spans"].as_array().unwrap();
    let by_seq: BTreeMap<i64, &Value> = spans
        .iter()
        .map(|s| (jtag(&s["tags"], "mantle.seq").unwrap().as_i64().unwrap(), s))
        .collect();
    let parents = expected_parents(&l);
    for (i, r) in l.iter().enumerate() {
        let s = by_seq[&r["seq"].as_i64().unwrap()];
        let p = &t["processes"][s["processID"].as_str().unwrap()];
        assert_eq!(p["serviceName"], r["rx_comm"], "{s}");
        assert_eq!(jtag(&p["tags"], "host.name").unwrap(), &r["host"]);
        assert_eq!(jtag(&s["tags"], "mantle.via").unwrap(), &r["via"]);
        let refs = s["references"].as_array().cloned().unwrap_or_default();
        match parents[i] {
            None => assert!(refs.is_empty(), "{s}"),
            Some(pj) => {
                let ps = by_seq[&l[pj]["seq"].as_i64().unwrap()];
                assert_eq!(refs.len(), 1, "{s}");
                assert_eq!(refs[0]["refType"], "CHILD_OF");
                assert_eq!(refs[0]["spanID"], ps["spanID"], "{r}");
            }
        }
    }
    // and Jaeger lists the demo's processes as services
    let services = j.get("/api/services").unwrap();
    for want in ["sed", "socat", "tr"] {
        assert!(
            services["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s == want),
            "{want} in {services}"
        );
    }
}

#[test]
#[ignore = "needs root: the tags kernel side; and Jaeger (scripts/setup.sh)"]
fn jaeger_stopped_and_restarted_during_an_export_loses_nothing_within_the_retry_window() {
    require_root("the kernel side");
    let k = kernel::loaded(&SPEC);
    let mut j = jaeger_for("jaeger_stopped_and_restarted");
    let tag = Tag::new("restart");
    let ex = Export::start(
        &k.dir,
        &j.url(),
        &["--tags", &tag.0, "--retry-window", "60s"],
    );
    small_pipeline(&tag.0);
    let first = lifeline(&tag.0).len();
    // Jaeger down: these wait in the exporter
    poll_until_for(Duration::from_secs(20), || {
        let t = j.get("/api/traces?service=cat&limit=5")?;
        (t["data"]
            .as_array()?
            .iter()
            .map(|t| t["spans"].as_array().map_or(0, |s| s.len()))
            .sum::<usize>()
            >= 1)
            .then_some(())
    })
    .expect("the first spans reach Jaeger");
    j.stop();
    for _ in 0..3 {
        small_pipeline(&tag.0);
    }
    std::thread::sleep(Duration::from_secs(2));
    let all = lifeline(&tag.0);
    let during: Vec<i64> = all[first..]
        .iter()
        .map(|r| r["seq"].as_i64().unwrap())
        .collect();
    let (otlp, query, grpc) = (j.otlp, j.query, j.grpc);
    let j2 = Jaeger::start(otlp, query, grpc);
    // Jaeger's memory started empty: what it has now came from the retries
    let got = poll_until_for(Duration::from_secs(60), || {
        let t = j2.get("/api/traces?service=cat&limit=20")?;
        let seqs: Vec<i64> = t["data"]
            .as_array()?
            .iter()
            .flat_map(|t| t["spans"].as_array().cloned().unwrap_or_default())
            .filter_map(|s| jtag(&s["tags"], "mantle.seq").and_then(Value::as_i64))
            .collect();
        let all_services = j2.get("/api/traces?service=sh&limit=20")?;
        let mut seqs2: Vec<i64> = all_services["data"]
            .as_array()?
            .iter()
            .flat_map(|t| t["spans"].as_array().cloned().unwrap_or_default())
            .filter_map(|s| jtag(&s["tags"], "mantle.seq").and_then(Value::as_i64))
            .collect();
        seqs2.extend(seqs);
        during.iter().all(|s| seqs2.contains(s)).then_some(seqs2)
    });
    let (r, err) = ex.stop();
    assert!(
        got.is_some(),
        "receptions made while Jaeger was down are in Jaeger after its restart: {r} {err}"
    );
    assert_eq!(r["queue"]["dropped_expired"], 0, "{r}");
    assert_eq!(r["queue"]["dropped_full"], 0, "{r}");
    assert!(r["queue"]["failures"].as_u64().unwrap() >= 1, "{r}");
    assert!(err.contains("the collector fails"), "{err}");
}

/// docs/otel.md's collector and Jaeger configurations (the ```yaml blocks
/// that open with `# collector` or `# jaeger`) as the Jaeger binary's
/// `validate` (a collector distribution) reads them: every key known,
/// every pipeline naming configured components. A broken copy is refused,
/// so the check can fail.
#[test]
#[ignore = "needs Jaeger (scripts/setup.sh)"]
fn the_documented_configurations_are_valid() {
    mantle_testsupport::require(
        &format!("{} (bash scripts/setup.sh builds it)", jaeger::JAEGER),
        Path::new(jaeger::JAEGER).exists(),
        "by the_documented_configurations_are_valid",
    );
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/otel.md"))
        .unwrap();
    let blocks: Vec<&str> = doc
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .filter(|b| b.starts_with("# collector") || b.starts_with("# jaeger"))
        .collect();
    assert_eq!(
        blocks.len(),
        2,
        "docs/otel.md: a collector's and a Jaeger's configuration"
    );
    let dir = std::env::temp_dir().join(format!("mantle-otel-conf-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let validate = |name: &str, text: &str| {
        let f = dir.join(name);
        std::fs::write(&f, text).unwrap();
        let o = Command::new(jaeger::JAEGER)
            .arg("validate")
            .arg("--config")
            .arg(&f)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let mut results = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        results.push((
            b.lines().next().unwrap().to_string(),
            validate(&format!("{i}.yaml"), b),
        ));
    }
    // the control: an exporter the pipelines name but nobody configured
    let broken = blocks[0].replacen(
        "exporters: [prometheus]",
        "exporters: [prometheusremotewrite]",
        1,
    );
    assert_ne!(
        broken, blocks[0],
        "the control changes the collector's configuration"
    );
    let control = validate("broken.yaml", &broken);
    let _ = std::fs::remove_dir_all(&dir);
    for (what, (ok, err)) in results {
        assert!(ok, "docs/otel.md `{what}`: {err}");
    }
    assert!(
        !control.0,
        "a pipeline naming an unconfigured exporter is refused"
    );
    assert!(control.1.contains("prometheusremotewrite"), "{}", control.1);
}

/// docs/otel.md's collector configuration, run (by the Jaeger binary, a
/// collector distribution) with its addresses moved to free loopback
/// ports: a lifeline sent to its `otlp` receiver reaches a Jaeger behind
/// it (the `otlphttp/tempo` exporter pointed at that Jaeger; the
/// `otlp/jaeger` one at a port where nothing listens, which must not hold
/// the other back), and `run --count`'s metrics come out of its
/// `prometheus` exporter.
#[test]
#[ignore = "needs root: the tags kernel side; and Jaeger (scripts/setup.sh)"]
fn the_documented_collector_forwards_lifelines_and_counts() {
    require_root("the kernel side");
    kernel::loaded(&SPEC);
    let j = jaeger_for("the_documented_collector_forwards_lifelines_and_counts");
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/otel.md"))
        .unwrap();
    let mut conf = doc
        .split("```yaml\n")
        .filter_map(|b| b.split("```").next())
        .find(|b| b.starts_with("# collector"))
        .expect("docs/otel.md has the collector's configuration")
        .to_string();
    let (rx_port, prom_port) = (jaeger::free_port(), jaeger::free_port());
    for (from, to) in [
        ("127.0.0.1:4318", format!("127.0.0.1:{rx_port}")),
        ("https://tempo.example:4318", j.url()),
        (
            "jaeger.example:4317",
            format!("127.0.0.1:{}", jaeger::free_port()),
        ),
        ("127.0.0.1:8889", format!("127.0.0.1:{prom_port}")),
    ] {
        assert!(
            conf.contains(from),
            "the collector's configuration has {from}"
        );
        conf = conf.replace(from, &to);
    }
    let file = std::env::temp_dir().join(format!("mantle-otel-collector-{}.yaml", rand_suffix()));
    std::fs::write(&file, &conf).unwrap();
    let mut collector = Command::new(jaeger::JAEGER)
        .arg("--config")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child, &'a Path);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
            let _ = std::fs::remove_file(self.1);
        }
    }
    let _guard = Kill(&mut collector, &file);
    poll_until_for(Duration::from_secs(30), || {
        TcpStream::connect(("127.0.0.1", rx_port)).ok()
    })
    .expect("the collector listens");
    let url = format!("http://127.0.0.1:{rx_port}");

    let tag = Tag::new("collector");
    small_pipeline(&tag.0);
    let l = lifeline(&tag.0);
    let o = mantle(&["tag", "lifeline", &tag.0, "--otlp", &url]);
    assert_eq!(o.code, 0, "{o:?}");
    let id = o
        .stdout
        .split("(trace ")
        .nth(1)
        .unwrap()
        .trim_end()
        .trim_end_matches(')')
        .to_string();
    poll_until_for(Duration::from_secs(30), || {
        j.trace(&id)
            .filter(|t| t["spans"].as_array().map_or(0, |s| s.len()) == l.len())
    })
    .unwrap_or_else(|| {
        panic!(
            "Jaeger behind the collector has not the trace {id} with {} spans: {:?}",
            l.len(),
            j.trace(&id)
        )
    });

    let o = mantle(&[
        "run",
        "--trace=openat",
        "--count",
        "--otlp",
        &url,
        "--",
        "cat",
        "/etc/hostname",
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    let scrape = || {
        let mut s = TcpStream::connect(("127.0.0.1", prom_port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut b = String::new();
        s.read_to_string(&mut b).ok()?;
        b.contains("mantle_exec_calls").then_some(b)
    };
    let m = poll_until_for(Duration::from_secs(30), scrape)
        .expect("the collector's prometheus exporter shows mantle_exec_calls");
    assert!(m.contains("mantle_call=\"openat\""), "{m}");
}
