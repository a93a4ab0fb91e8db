//! Lifelines as files: the JSON that `mantle tag lifeline --json` writes
//! (one schema with tags and threads: a TTL is a number of hops, or null
//! for unlimited), reading such files back, and putting this machine's
//! lifeline together with files saved on others for
//! [`crate::lifeline::merge`]. File I/O is the caller's: it names the files
//! and reports their errors.

use crate::abi::MT_TTL_INF;
use crate::{Error, ReceptionInfo, Tags};
use serde_json::Value;

/// A lifeline record as JSON. The library keeps the kernel's 255 for an
/// unlimited TTL (the value the records carry); JSON says null.
fn reception_to_json(r: &ReceptionInfo) -> Value {
    let mut v = serde_json::to_value(r).expect("a ReceptionInfo serializes");
    if r.ttl == MT_TTL_INF as u8 {
        v["ttl"] = Value::Null;
    }
    v
}

/// [`to_json`] written record by record to `w` (pretty, as
/// `to_string_pretty` of it, and a newline): no document tree of a long
/// lifeline in memory.
pub fn write_json(l: &[ReceptionInfo], w: &mut dyn std::io::Write) -> std::io::Result<()> {
    use serde::Serializer as _;
    let mut ser =
        serde_json::Serializer::with_formatter(&mut *w, serde_json::ser::PrettyFormatter::new());
    ser.collect_seq(l.iter().map(reception_to_json))
        .map_err(std::io::Error::other)?;
    writeln!(w)
}

/// A lifeline as JSON: an array of records, oldest first.
pub fn to_json(l: &[ReceptionInfo]) -> Value {
    Value::Array(l.iter().map(reception_to_json).collect())
}

/// Reads back a record saved as JSON (null, or 255 from older versions,
/// for unlimited).
fn reception_from_json(mut v: Value) -> Result<ReceptionInfo, serde_json::Error> {
    if v.get("ttl").is_some_and(Value::is_null) {
        v["ttl"] = MT_TTL_INF.into();
    }
    serde_json::from_value(v)
}

/// Reads back a lifeline saved as JSON; `origin` (a file name) is named in
/// the error, which is [`Error::Invalid`]: the user gave a malformed file.
pub fn parse(origin: &str, text: &str) -> Result<Vec<ReceptionInfo>, Error> {
    serde_json::from_str::<Vec<Value>>(text)
        .and_then(|v| v.into_iter().map(reception_from_json).collect())
        .map_err(|e| {
            Error::Invalid(format!(
                "{origin} is not a lifeline saved with `mantle tag lifeline --json`: {e}"
            ))
        })
}

/// At most this many records are read from the files of one `--merge`
/// (all files together): 16 machines' full rings of the largest lifeline
/// (65536 records each). Beyond it the merge is refused, not truncated.
pub const MAX_MERGE_RECORDS: usize = 16 * 65536;

/// What one saved file gave for tag `name`: its records of the tag, and
/// how many records of other tags it held (left out).
#[derive(Debug)]
pub struct Saved {
    pub records: Vec<ReceptionInfo>,
    pub others: usize,
}

/// Reads a saved lifeline (the file's bytes) record by record, keeping only tag `name`'s
/// records: each record is converted as it is read (no document tree of
/// the whole file), and at most `*budget` records are read in all (the
/// budget is shared by every file of one merge, and decremented). A file
/// that holds records but none of `name`'s is refused: the user named the
/// wrong file or the wrong tag (issue 32: it was accepted silently).
pub fn parse_tag(
    origin: &str,
    bytes: &[u8],
    name: &str,
    budget: &mut usize,
) -> Result<Saved, Error> {
    use serde::de::{Deserializer as _, SeqAccess, Visitor};
    struct V<'a> {
        name: &'a str,
        budget: &'a mut usize,
    }
    impl<'de> Visitor<'de> for V<'_> {
        type Value = Saved;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array of lifeline records")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Saved, A::Error> {
            let mut out = Saved {
                records: Vec::new(),
                others: 0,
            };
            while let Some(v) = seq.next_element::<Value>()? {
                if *self.budget == 0 {
                    return Err(serde::de::Error::custom(format!(
                        "more than {MAX_MERGE_RECORDS} records in the files of one merge"
                    )));
                }
                *self.budget -= 1;
                let rec = reception_from_json(v).map_err(serde::de::Error::custom)?;
                if rec.tag == self.name {
                    out.records.push(rec);
                } else {
                    out.others += 1;
                }
            }
            Ok(out)
        }
    }
    let bad = |e: serde_json::Error| {
        Error::Invalid(format!(
            "{origin} is not a lifeline saved with `mantle tag lifeline --json`: {e}"
        ))
    };
    // From a slice, not a reader: serde_json reads a reader byte by byte
    // (200 000 records: 86 s in a debug build against a few from memory).
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let saved = de.deserialize_seq(V { name, budget }).map_err(bad)?;
    de.end().map_err(bad)?;
    if saved.records.is_empty() && saved.others > 0 {
        return Err(Error::Invalid(format!(
            "{origin} holds {} record(s), none of tag {name:?}: a lifeline of another tag",
            saved.others
        )));
    }
    Ok(saved)
}

/// This machine's lifeline of tag `name`; `None` when the tag exists but
/// was made without one (told apart only for those who may read
/// lifelines: others are refused first).
pub fn local(name: &str) -> Result<Option<Vec<ReceptionInfo>>, Error> {
    let t = Tags::open()?;
    if mantle_sys::os::privileged() && t.info(t.lookup(name)?)?.lifeline == 0 {
        return Ok(None);
    }
    Ok(Some(t.lifeline(name)?))
}

/// One lifeline of tag `name` from this machine's (if any) and saved ones,
/// in causal order; records of other tags in the saved files are left out.
pub fn gather(
    name: &str,
    local: Option<Vec<ReceptionInfo>>,
    saved: Vec<Vec<ReceptionInfo>>,
) -> Vec<ReceptionInfo> {
    let parts = local
        .into_iter()
        .chain(
            saved
                .into_iter()
                .map(|l| l.into_iter().filter(|r| r.tag == name).collect()),
        )
        .collect();
    crate::lifeline::merge(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_reception;

    #[test]
    fn unlimited_ttl_is_null_and_reads_back() {
        let mut finite = test_reception(2, 20, 2, 1, "pipe", "a");
        finite.ttl = 3;
        let l = vec![test_reception(1, 10, 1, 1, "set", "a"), finite];
        let v = to_json(&l);
        assert!(v[0]["ttl"].is_null());
        assert_eq!(v[1]["ttl"], 3);
        let text = serde_json::to_string_pretty(&v).unwrap();
        assert_eq!(parse("f", &text).unwrap(), l);
    }

    #[test]
    fn written_json_is_the_pretty_document() {
        let l = vec![
            test_reception(1, 10, 1, 1, "set", "a"),
            test_reception(2, 20, 2, 1, "pipe", "b"),
        ];
        let mut v = Vec::new();
        write_json(&l, &mut v).unwrap();
        assert_eq!(
            String::from_utf8(v).unwrap(),
            serde_json::to_string_pretty(&to_json(&l)).unwrap() + "\n"
        );
    }

    #[test]
    fn older_files_with_255_read_back() {
        let r = test_reception(1, 10, 1, 1, "set", "a");
        let text = serde_json::to_string(&vec![&r]).unwrap();
        assert!(text.contains("\"ttl\":255"));
        assert_eq!(parse("f", &text).unwrap(), vec![r]);
    }

    #[test]
    fn malformed_files_are_invalid_and_named() {
        for bad in ["", "{}", "[1]", "[{\"seq\": 1}]"] {
            match parse("there.json", bad) {
                Err(Error::Invalid(m)) => {
                    assert!(m.starts_with("there.json is not a lifeline"), "{m}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn parse_tag_streams_filters_and_bounds() {
        let mut other = test_reception(5, 50, 9, 9, "pipe", "b");
        other.tag = "u".into();
        let mine = test_reception(1, 10, 1, 1, "set", "a");
        let text = serde_json::to_string_pretty(&to_json(&[mine.clone(), other.clone()])).unwrap();
        let mut budget = 10;
        let s = parse_tag("f", text.as_bytes(), "t", &mut budget).unwrap();
        assert_eq!((s.records, s.others, budget), (vec![mine.clone()], 1, 8));
        // Only another tag's records: refused, and said so.
        let only = serde_json::to_string(&to_json(&[other])).unwrap();
        match parse_tag("g.json", only.as_bytes(), "t", &mut 10) {
            Err(Error::Invalid(m)) => assert!(m.contains("none of tag \"t\""), "{m}"),
            r => panic!("{r:?}"),
        }
        // An empty lifeline is a lifeline.
        assert!(parse_tag("e", "[]".as_bytes(), "t", &mut 10)
            .unwrap()
            .records
            .is_empty());
        // The budget is shared and refuses, never truncates.
        let mut budget = 1;
        match parse_tag("h.json", text.as_bytes(), "t", &mut budget) {
            Err(Error::Invalid(m)) => assert!(m.contains("more than"), "{m}"),
            r => panic!("{r:?}"),
        }
        for bad in ["", "{}", "[1]", "[] []"] {
            assert!(
                matches!(
                    parse_tag("x", bad.as_bytes(), "t", &mut 10),
                    Err(Error::Invalid(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn gather_keeps_the_tag_and_merges() {
        let mut other = test_reception(5, 50, 9, 9, "pipe", "b");
        other.tag = "u".into();
        let local = vec![test_reception(1, 10, 1, 1, "set", "a")];
        let saved = vec![vec![test_reception(1, 10, 2, 1, "tcp", "b"), other]];
        let all = gather("t", Some(local.clone()), saved);
        assert_eq!(all.len(), 2);
        assert!(all.iter().all(|r| r.tag == "t"));
        // One part alone keeps its own order.
        assert_eq!(gather("t", Some(local.clone()), vec![]), local);
        assert!(gather("t", None, vec![]).is_empty());
    }
}
