//! Running the mantle CLI (and other programs) from a test, and reading
//! what `mantle tag get|threads|lifeline --json` print (docs/json.md).
//!
//! Output is captured through pipes here, so these run only commands that
//! hold no tag: a tagged process writing into a pipe the test reads would
//! tag the test process (see [`crate::actor`] for how tagged actors report).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A finished command: exit code (-1 when killed or not started), output.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The mantle binary under test (found once).
pub fn mantle_path() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(crate::build::mantle_bin)
}

/// A `Command` for the mantle binary under test.
pub fn mantle_cmd() -> Command {
    Command::new(mantle_path())
}

/// Runs `prog args` with stdin from /dev/null; a program that cannot start
/// gives code -1 and says why in stderr.
pub fn run(prog: &str, args: &[&str]) -> Out {
    output(Command::new(prog).args(args), prog)
}

fn output(cmd: &mut Command, what: &str) -> Out {
    match cmd.stdin(Stdio::null()).output() {
        Ok(o) => Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        },
        Err(e) => Out {
            code: -1,
            stdout: String::new(),
            stderr: format!("cannot run {what}: {e}"),
        },
    }
}

/// Runs mantle as user `uid` (and group `uid`), or as ourselves.
pub fn mantle_as(uid: Option<u32>, args: &[&str]) -> Out {
    let mut cmd = mantle_cmd();
    cmd.args(args);
    if let Some(u) = uid {
        // std drops supplementary groups too (setgroups(0)).
        cmd.uid(u).gid(u);
    }
    output(&mut cmd, "mantle")
}

pub fn mantle(args: &[&str]) -> Out {
    mantle_as(None, args)
}

/// Runs mantle and requires exit code `code`.
#[track_caller]
pub fn mantle_code(code: i32, args: &[&str]) -> Out {
    let o = mantle(args);
    assert_eq!(
        o.code,
        code,
        "`mantle {}`: exit {} (want {code})\nstdout: {}\nstderr: {}",
        args.join(" "),
        o.code,
        o.stdout,
        o.stderr
    );
    o
}

/// Runs mantle, requires success, returns its stdout.
#[track_caller]
pub fn mantle_ok(args: &[&str]) -> String {
    mantle_code(0, args).stdout
}

/// Runs mantle, requires success, parses its stdout as JSON.
#[track_caller]
pub fn json<T: serde::de::DeserializeOwned>(args: &[&str]) -> T {
    let out = mantle_ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("mantle {args:?}: {e}: {out}"))
}

/// Tags live thread `tid` holds (`tag get`: one object per thread, its tags
/// as {name, ttl}).
#[track_caller]
pub fn tags_of(tid: u32) -> BTreeSet<String> {
    let v: Value = json(&["tag", "get", "--tid", &tid.to_string(), "--json"]);
    v["tags"]
        .as_array()
        .unwrap_or_else(|| panic!("tag get json without tags: {v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

pub fn set_of(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// `tag threads [TAG] --json`.
#[track_caller]
pub fn threads_json(tag: Option<&str>) -> Vec<Value> {
    let mut args = vec!["tag", "threads"];
    args.extend(tag);
    args.push("--json");
    json(&args)
}

/// Every thread holding `tag`, with the TTL it holds (`tag threads`; an
/// unlimited TTL is null in every schema, 255 here).
#[track_caller]
pub fn holders(tag: &str) -> BTreeMap<u32, u8> {
    threads_json(Some(tag))
        .into_iter()
        .map(|t| {
            let tid = t["tid"].as_u64().unwrap() as u32;
            let ttl = t["tags"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == tag)
                .map(|p| p["ttl"].as_u64().unwrap_or(255) as u8)
                .unwrap_or_else(|| panic!("tag threads {tag}: {t} lacks the tag"));
            (tid, ttl)
        })
        .collect()
}

/// `tag lifeline TAG --json`.
#[track_caller]
pub fn lifeline(tag: &str) -> Vec<Value> {
    json(&["tag", "lifeline", tag, "--json"])
}

/// Threads of the test process that hold a tag, with their tags. The test
/// process must never be tagged: it would tag every actor it starts
/// afterwards. A thread that ended meanwhile (`tag get` fails) holds none.
pub fn test_process_tags() -> Vec<(u32, BTreeSet<String>)> {
    let mut bad = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let o = mantle(&["tag", "get", "--tid", &tid.to_string(), "--json"]);
        if o.code != 0 {
            continue;
        }
        let v: Value = serde_json::from_str(&o.stdout)
            .unwrap_or_else(|e| panic!("tag get --tid {tid} --json: {e}: {}", o.stdout));
        let held: BTreeSet<String> = v["tags"]
            .as_array()
            .unwrap_or_else(|| panic!("tag get json without tags: {v}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        if !held.is_empty() {
            bad.push((tid, held));
        }
    }
    bad
}
