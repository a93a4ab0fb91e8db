//! `mantle prof diff A B` (issue 33): per-function shares of two
//! sessions and their deltas, in text and JSON; a session compared with
//! itself changes nothing; a missing session is exit 5 (not found).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");

fn mantle(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(MANTLE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mantle");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn synth(dir: &Path, seed: u64, rows: u64) -> PathBuf {
    let s = dir.join(format!("s{seed}"));
    let o = mantle_prof::synth::SynthOpts {
        rows,
        stacks: 20,
        depth: 6,
        seed,
        images: vec!["/usr/lib/x86_64-linux-gnu/libc.so.6".into()],
    };
    mantle_prof::synth::write(&s, &o).unwrap();
    s
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = mantle(args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn diff_of_two_sessions_in_text_and_json() {
    let d = std::env::temp_dir().join(format!("mantle-prof-diff-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir(&d).unwrap();
    let (a, b) = (synth(&d, 1, 300), synth(&d, 2, 500));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let v = json(&["prof", "diff", a, b, "--json"]);
    let rows = v["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{v}");
    let sum = |k: &str| rows.iter().map(|r| r[k].as_f64().unwrap()).sum::<f64>();
    assert!((sum("baseline_percent") - 100.0).abs() < 1e-6, "{v}");
    assert!((sum("new_percent") - 100.0).abs() < 1e-6, "{v}");
    assert!(sum("delta").abs() < 1e-6, "{v}");
    // largest change first
    let d0 = rows[0]["delta"].as_f64().unwrap().abs();
    assert!(rows
        .iter()
        .all(|r| r["delta"].as_f64().unwrap().abs() <= d0));
    assert!(rows.iter().any(|r| r["delta"].as_f64().unwrap() != 0.0));
    // a session against itself: nothing changed
    let v = json(&["prof", "diff", a, a, "--json"]);
    for r in v["rows"].as_array().unwrap() {
        assert_eq!(r["delta"].as_f64(), Some(0.0), "{r}");
        assert_eq!(r["inclusive_delta"].as_f64(), Some(0.0), "{r}");
    }
    // -n limits the rows, text has the columns
    let v = json(&["prof", "diff", a, b, "--json", "-n", "2"]);
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    let (code, out, err) = mantle(&["prof", "diff", a, b, "-n", "3"]);
    assert_eq!(code, 0, "{err}");
    let after_header = out.lines().skip_while(|l| !l.contains("BASELINE%")).count();
    assert!(out.contains("DELTA") && after_header == 1 + 3, "{out}");
    // the differential flame graph: the function that changed most is
    // in it with its change in points (inferno's tooltip)
    let svg = d.join("diff.svg");
    let (code, _, err) = mantle(&["prof", "diff", a, b, "--flamegraph", svg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<?xml") && text.contains("mantle prof diff"));
    let v = json(&["prof", "diff", a, b, "--json"]);
    let top = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["new_samples"].as_u64() > Some(0) && r["delta"].as_f64() != Some(0.0))
        .expect("a changed function present in B");
    let name = top["symbol"].as_str().unwrap();
    let titles: Vec<&str> = text
        .match_indices(&format!("<title>{name} ("))
        .map(|(at, _)| &text[at..at + text[at..].find("</title>").unwrap()])
        .collect();
    assert!(!titles.is_empty(), "{name} not in the SVG");
    assert!(
        titles
            .iter()
            .any(|t| t.contains("%; +") || t.contains("%; -")),
        "{titles:?}"
    );
    // a missing session: not found
    let (code, _, err) = mantle(&["prof", "diff", a, d.join("none").to_str().unwrap()]);
    assert_eq!(code, 5, "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
