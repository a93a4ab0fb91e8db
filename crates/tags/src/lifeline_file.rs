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
