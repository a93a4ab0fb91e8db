//! The README's map of the code stays true (issue 34): every crate under
//! `crates/` has a row in the README's "Layout" table, and every crate row
//! of that table names a crate that exists. A crate added without its row,
//! or removed with its row left behind, fails here, in `cargo test
//! --workspace`, needing neither root nor a build of mantle.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The crates on disk: every directory of `crates/` with a Cargo.toml.
fn crates_on_disk(root: &Path) -> BTreeSet<String> {
    let dir = root.join("crates");
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let e = e.expect("a directory entry of crates/");
        if e.path().join("Cargo.toml").is_file() {
            out.insert(e.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

/// The crates the README's "## Layout" section names in its table's first
/// column as `crates/NAME` (a path below a crate, `crates/exec/src/sched/`,
/// counts for the crate only when it is the row's own path).
fn crates_in_layout(readme: &str) -> Result<BTreeSet<String>, String> {
    let start = readme
        .lines()
        .position(|l| l.trim() == "## Layout")
        .ok_or("the README has no \"## Layout\" section")?;
    let mut out = BTreeSet::new();
    for line in readme.lines().skip(start + 1) {
        if line.starts_with("## ") {
            break;
        }
        let Some(first) = line
            .trim()
            .strip_prefix('|')
            .and_then(|r| r.split('|').next())
        else {
            continue;
        };
        let cell = first.trim().trim_matches('`').trim_end_matches('/');
        if let Some(name) = cell.strip_prefix("crates/") {
            if !name.is_empty() && !name.contains('/') {
                out.insert(name.to_string());
            }
        }
    }
    if out.is_empty() {
        return Err("the README's Layout section has no `crates/NAME` row".into());
    }
    Ok(out)
}

/// What is wrong between the two sets, one line each; empty when none.
fn mismatches(disk: &BTreeSet<String>, table: &BTreeSet<String>) -> Vec<String> {
    let mut out: Vec<String> = disk
        .difference(table)
        .map(|c| format!("crates/{c} has no row in the README's Layout table"))
        .collect();
    out.extend(
        table
            .difference(disk)
            .map(|c| format!("the README's Layout table names crates/{c}, which does not exist")),
    );
    out
}

#[test]
fn every_crate_has_a_row_in_the_readme_layout_table() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md"))
        .expect("README.md at the repository's root");
    let table = crates_in_layout(&readme).unwrap_or_else(|e| panic!("{e}"));
    let disk = crates_on_disk(&root);
    assert!(
        disk.len() >= 12,
        "crates/ holds {} crates: {disk:?}",
        disk.len()
    );
    let bad = mismatches(&disk, &table);
    assert!(bad.is_empty(), "README.md, Layout:\n{}", bad.join("\n"));
}

/// The check itself can fail: a table without one crate, or with one too
/// many, is reported by name.
#[test]
fn a_missing_or_stale_row_is_reported() {
    let readme = "# x\n\n## Layout\n\n| path | what |\n| --- | --- |\n| `crates/abi` | a |\n| `crates/gone` | b |\n| `crates/exec/src/sched/` | c |\n\n## Next\n\n| `crates/sys` | d |\n";
    let table = crates_in_layout(readme).unwrap();
    assert_eq!(
        table,
        BTreeSet::from(["abi".to_string(), "gone".to_string()])
    );
    let disk = BTreeSet::from(["abi".to_string(), "sys".to_string()]);
    assert_eq!(
        mismatches(&disk, &table),
        vec![
            "crates/sys has no row in the README's Layout table".to_string(),
            "the README's Layout table names crates/gone, which does not exist".to_string(),
        ]
    );
    assert!(crates_in_layout("# x\n\n## Tests\n").is_err());
}
