//! What the fuzz targets share: oracles written independently of the code
//! under test, a serializer for cluster tables (the library has only the
//! parser), and the checks on lifeline renderings. Each check panics with
//! a message naming the broken property, which libFuzzer reports as a
//! crash with the input that broke it.

use arbitrary::Arbitrary;
use mantle_tags::model::ClusterTable;
use mantle_tags::ReceptionInfo;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The characters a tag name may use, as docs/tags.md states them.
pub fn name_char(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_uppercase() || c.is_ascii_digit() || b"_.:-".contains(&c)
}

/// docs/tags.md's rule for names, restated: 1-31 characters from
/// `[A-Za-z0-9_.:-]`, not starting with '-'.
pub fn name_ok(s: &str) -> bool {
    (1..=31).contains(&s.len()) && s.bytes().all(name_char) && !s.starts_with('-')
}

/// An unsigned decimal as Rust's integer parsers take it (optional '+',
/// then at least one digit), saturated at u128::MAX.
pub fn decimal(s: &str) -> Option<u128> {
    let d = s.strip_prefix('+').unwrap_or(s);
    if d.is_empty() || !d.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(d.bytes().fold(0u128, |n, c| {
        n.saturating_mul(10).saturating_add((c - b'0') as u128)
    }))
}

/// A cluster table as text, in the documented syntax: one tag per line,
/// `NAME [ttl=N] [system] [deadlock]`.
pub fn cluster_to_text(t: &ClusterTable) -> String {
    let mut s = String::new();
    for g in &t.tags {
        s += &g.name;
        if let Some(ttl) = g.ttl {
            s += &format!(" ttl={ttl}");
        }
        if g.system {
            s += " system";
        }
        if g.deadlock {
            s += " deadlock";
        }
        s += "\n";
    }
    s
}

/// The properties every accepted cluster table has.
pub fn check_cluster(t: &ClusterTable, text: &str) {
    assert!(t.tags.len() <= 16, "more than 16 global tags accepted");
    assert_ne!(t.digest, 0, "digest 0 means 'no table' on the wire");
    let names: BTreeSet<&str> = t.tags.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names.len(),
        t.tags.len(),
        "a name listed twice was accepted"
    );
    for g in &t.tags {
        assert!(name_ok(&g.name), "invalid name {:?} accepted", g.name);
        assert_ne!(g.ttl, Some(255), "ttl=inf must read as None");
    }
    // Every line that is not blank or a comment is one tag.
    let lines = text
        .lines()
        .filter(|l| !l.split('#').next().unwrap_or("").trim().is_empty())
        .count();
    assert_eq!(lines, t.tags.len(), "lines and tags differ");
}

/// A parsed table, written out and parsed again, is the same table, with
/// the same digest (comments, spacing and attribute order do not matter).
pub fn check_cluster_round_trip(t: &ClusterTable) {
    let text = cluster_to_text(t);
    let back = mantle_tags::model::parse_cluster(&text)
        .unwrap_or_else(|e| panic!("serialized table {text:?} does not parse: {e}"));
    assert_eq!(&back, t, "round trip through {text:?} changed the table");
}

/// XML 1.0's Char production: what may appear in a document at all.
pub fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
}

/// An SVG lifeline is well-formed XML (a browser refuses anything else)
/// with one mark, and so one `<title>`, per reception: text from the
/// records (command names, IPC names, hosts) never becomes markup.
pub fn check_svg(svg: &str, receptions: usize) {
    if let Some(c) = svg.chars().find(|&c| !xml_char(c)) {
        panic!("SVG holds {c:?}, which XML 1.0 does not allow");
    }
    let doc = roxmltree::Document::parse(svg)
        .unwrap_or_else(|e| panic!("SVG is not well-formed XML: {e}\n{svg}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let titles = root
        .descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == "title")
        .count();
    assert_eq!(titles, receptions, "one <title> per reception");
    let elements: BTreeSet<&str> = root
        .descendants()
        .filter(|n| n.is_element())
        .map(|n| n.tag_name().name())
        .collect();
    for e in elements {
        assert!(
            ["svg", "rect", "text", "line", "title"].contains(&e),
            "element <{e}> injected into the SVG"
        );
    }
}

/// The Chrome trace of a lifeline: valid JSON that reads back equal, one
/// reception slice per record, every flow start has its one end, flow ids
/// are unique, and every process it draws on is named.
pub fn check_chrome(v: &Value, l: &[ReceptionInfo]) {
    let text = serde_json::to_string(v).expect("a Value serializes");
    let back: Value = serde_json::from_str(&text).expect("the trace parses back");
    assert_eq!(&back, v, "trace JSON round trip");
    let ev = v["traceEvents"].as_array().expect("traceEvents");
    let slices = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e.get("args").is_some())
        .count();
    assert_eq!(slices, l.len(), "one reception slice per record");
    let mut starts: BTreeMap<String, usize> = BTreeMap::new();
    let mut ends: BTreeMap<String, usize> = BTreeMap::new();
    for e in ev {
        let id = || e["id"].to_string();
        match e["ph"].as_str() {
            Some("s") => *starts.entry(id()).or_default() += 1,
            Some("f") => *ends.entry(id()).or_default() += 1,
            _ => {}
        }
    }
    assert_eq!(starts, ends, "every flow start has its end");
    assert!(starts.values().all(|&n| n == 1), "flow ids are unique");
    let named: BTreeSet<u64> = ev
        .iter()
        .filter(|e| e["ph"] == "M")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    for e in ev {
        if let Some(p) = e["pid"].as_u64() {
            assert!(named.contains(&p), "pid {p} has no process_name");
        }
    }
}

/// What `--json` writes for a lifeline reads back equal, so a merged
/// lifeline can itself be merged again.
pub fn check_json_round_trip(l: &[ReceptionInfo]) {
    let text = serde_json::to_string_pretty(l).expect("records serialize");
    let back: Vec<ReceptionInfo> = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("saved lifeline does not read back: {e}\n{text}"));
    assert_eq!(back, l, "saved lifeline reads back different");
}

/// The merge as documented. One lifeline (one machine's ring, or one
/// file) comes out as it went in, in its own order. Several are ordered by
/// Lamport clock, then host, then the host's own sequence; a reception
/// given twice (the same record in two files) appears once; no distinct
/// reception is lost or invented; and the result depends neither on the
/// order of the files nor on merging it again.
pub fn check_merge(parts: &[Vec<ReceptionInfo>], out: &[ReceptionInfo]) {
    if parts.len() == 1 {
        assert_eq!(out, &parts[0][..], "one lifeline keeps its order");
        return;
    }
    let key = |r: &ReceptionInfo| (r.lamport, r.host.clone(), r.seq);
    for w in out.windows(2) {
        assert!(key(&w[0]) <= key(&w[1]), "merge output out of order");
    }
    for (i, a) in out.iter().enumerate() {
        assert!(
            !out[i + 1..].contains(a),
            "the same reception twice in the merge: {a:?}"
        );
    }
    for r in parts.iter().flatten() {
        assert!(out.contains(r), "merge lost a reception: {r:?}");
    }
    for r in out {
        assert!(
            parts.iter().flatten().any(|p| p == r),
            "merge invented a reception: {r:?}"
        );
    }
    let mut rev = parts.to_vec();
    rev.reverse();
    assert_eq!(
        mantle_tags::lifeline::merge(rev),
        out,
        "the order of the files changed the merge"
    );
    assert_eq!(
        mantle_tags::lifeline::merge(vec![out.to_vec(), out.to_vec()]),
        out,
        "merging the merge with itself changed it"
    );
}

/// A string for a structured record: mostly from a small pool, so that
/// records collide on hosts, tags and IPC names the way real ones do,
/// sometimes anything at all (a hostile comm, a hand-edited file).
#[derive(Arbitrary, Debug, Clone)]
pub enum Text {
    Pool(u8),
    Free(String),
}

impl Text {
    pub fn get(&self, pool: &[&str]) -> String {
        match self {
            Text::Pool(i) => pool[*i as usize % pool.len()].to_string(),
            Text::Free(s) => s.clone(),
        }
    }
}

/// A lifeline record with small numbers, so that sequence numbers, clocks
/// and pids collide across records and parts.
#[derive(Arbitrary, Debug, Clone)]
pub struct Rec {
    pub seq: u8,
    pub ts: u16,
    pub tag: Text,
    pub rx_tid: u8,
    pub rx_pid: u8,
    pub rx_comm: Text,
    pub tx_tid: u8,
    pub tx_pid: u8,
    pub via: Text,
    pub ttl: u8,
    pub host: Text,
    pub tx_host: Text,
    pub lamport: u8,
}

impl Rec {
    pub fn info(&self) -> ReceptionInfo {
        let hosts = ["a", "b", "c"];
        ReceptionInfo {
            seq: self.seq as u64 % 8,
            ts_ns: self.ts as u64 * 1000,
            tag: self.tag.get(&["t", "u"]),
            rx_tid: self.rx_tid as u32 % 6,
            rx_pid: self.rx_pid as u32 % 4,
            rx_comm: self.rx_comm.get(&["sh", "cat", "srv"]),
            tx_tid: self.tx_tid as u32 % 6,
            tx_pid: self.tx_pid as u32 % 4,
            via: self.via.get(&["set", "pipe", "tcp", "fork", "unix-stream"]),
            ttl: self.ttl,
            host: self.host.get(&hosts),
            tx_host: self.tx_host.get(&hosts),
            lamport: self.lamport as u64 % 8,
        }
    }
}
