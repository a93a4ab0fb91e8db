//! Sessions from disk are untrusted input: every file `prof report` reads
//! is validated once at load, special files are never opened in a way that
//! can block, and counts never wrap. These tests build sessions with the
//! library's own writer, then corrupt one file at a time.

use mantle_prof::model::{Image, ImageKind, Meta, Mode, Process, Profile, RowKey, TagName};
use mantle_prof::session::{read_session, write_session, SessionData, FORMAT};
use mantle_prof::{report, Error, ReportOpts};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mantle-prof-sess-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn mkfifo(p: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

/// A small valid session at `dir`: one ELF image at `elf`, the kernel, and
/// (with `vdso`) the vDSO; counts `n` on each.
fn session(dir: &Path, elf: &str, n: u64) {
    let images = vec![
        Image {
            path: elf.into(),
            kind: ImageKind::Elf,
            build_id: None,
            pid: None,
        },
        Image::named("[kernel.kallsyms]", ImageKind::Kernel),
        Image::named("[vdso]", ImageKind::Vdso),
    ];
    let mut p = Profile::with_images(images);
    for (image, mode) in [(0, Mode::User), (1, Mode::Kernel), (2, Mode::User)] {
        let _ = p.add_row(
            RowKey {
                pid: 7,
                tid: 7,
                cpu: 0,
                mode,
                image,
                offset: 0x10,
                tags: vec![0; mantle_prof::abi::MT_WORDS],
                stack: 0,
                cgroup: 0,
            },
            n,
        );
    }
    let mut procs = HashMap::new();
    let mut w = Process::default();
    w.pid = 7;
    w.ppid = 1;
    w.comm = "w".into();
    procs.insert(7, w);
    let meta = Meta {
        format: FORMAT,
        event: "cpu-clock".into(),
        samples: 3 * n,
        kernel_symbols: true,
        ..Default::default()
    };
    write_session(
        dir,
        &SessionData {
            meta: &meta,
            profile: &p,
            procs: &procs,
            history: &[],
            tags: &[TagName {
                bit: 0,
                name: "a".into(),
            }],
            kallsyms_text: Some("ffffffff81000000 T _stext\n"),
            vdso: Some(&std::fs::read("/bin/true").unwrap()),
            jit_maps: &[],
            cgroups: &[],
            off_cpu: None,
        },
        true, // dir may be a fresh empty directory
    )
    .unwrap();
}

/// Runs the report in a thread; a report that blocks fails the test
/// instead of hanging it.
fn report_within(dir: &Path, opts: ReportOpts) -> Result<mantle_prof::Report, Error> {
    let (tx, rx) = mpsc::channel();
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(report::report(&d, &opts));
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("prof report blocked for 20 s (it opened a FIFO?)")
}

#[test]
fn a_fifo_named_in_images_json_is_not_opened() {
    let d = tmpdir("fifo-img");
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    let link = d.join("link-to-fifo");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    for p in [&fifo, &link] {
        let s = d.join("s");
        let _ = std::fs::remove_dir_all(&s);
        session(&s, &p.display().to_string(), 5);
        let r = report_within(&s, ReportOpts::default()).expect("report");
        assert_eq!(r.total, 15);
        assert!(
            r.caveats
                .iter()
                .any(|c| c.contains(&p.display().to_string()) && c.contains("not a regular file")),
            "{:?}",
            r.caveats
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn session_files_that_are_fifos_are_refused_without_blocking() {
    let d = tmpdir("fifo-files");
    for f in [
        "meta.json",
        "images.json",
        "tags.json",
        "profile.tsv",
        "vdso.so",
        "mappings.tsv",
    ] {
        let s = d.join(f);
        session(&s, "/bin/true", 1);
        std::fs::remove_file(s.join(f)).unwrap();
        mkfifo(&s.join(f));
        let e = report_within(&s, ReportOpts::default()).expect_err(f);
        assert!(
            matches!(e, Error::NotRegular { ref path, kind: "FIFO" } if path.ends_with(f)),
            "{f}: {e:?}"
        );
        let m = e.to_string();
        assert!(
            m.contains(f) && m.contains("not a regular file"),
            "{f}: {m}"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Replaces one file of a valid session and expects a load error naming it.
fn corrupt(tag: &str, file: &str, content: &[u8], expect: &[&str]) {
    let d = tmpdir(tag);
    session(&d, "/bin/true", 1);
    std::fs::write(d.join(file), content).unwrap();
    let e = match read_session(&d) {
        Ok(_) => panic!("{file} {content:?}: accepted"),
        Err(e) => e,
    };
    assert!(
        matches!(e, Error::Corrupt { file: ref f, .. } if f.ends_with(file)),
        "{e:?}"
    );
    let m = e.to_string();
    assert!(m.contains(file), "{m}");
    for x in expect {
        assert!(m.contains(x), "{file}: {m:?} lacks {x:?}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn corrupted_tags_json_is_an_error() {
    corrupt(
        "tags-garbage",
        "tags.json",
        b"[{\"bit\": 0, \"na",
        &["line 1"],
    );
    corrupt(
        "tags-bit",
        "tags.json",
        b"[{\"bit\": 100000, \"name\": \"x\"}]",
        &["bit"],
    );
    corrupt(
        "tags-dup",
        "tags.json",
        b"[{\"bit\": 1, \"name\": \"x\"}, {\"bit\": 1, \"name\": \"y\"}]",
        &["bit 1"],
    );
}

#[test]
fn corrupted_vdso_is_an_error() {
    corrupt("vdso-garbage", "vdso.so", b"not an ELF file", &["ELF"]);
    let mut elf = std::fs::read("/bin/true").unwrap();
    elf.truncate(4096); // the header promises section headers past the end
    corrupt("vdso-trunc", "vdso.so", &elf, &["past the file"]);
}

#[test]
fn corrupted_mappings_tsv_is_an_error() {
    corrupt("map-fields", "mappings.tsv", b"1\t1000\n", &["line 1"]);
    corrupt(
        "map-hex",
        "mappings.tsv",
        b"# pid\tstart\tend\tpgoff\tbuild_id\tpath\n1\tzz\t2000\t0\t-\t/bin/x\n",
        &["line 2", "start"],
    );
    corrupt(
        "map-order",
        "mappings.tsv",
        b"1\t2000\t1000\t0\t-\t/bin/x\n",
        &["line 1", "end"],
    );
}

#[test]
fn corrupted_profile_tsv_names_line_and_field() {
    // a pid that does not fit 32 bits was truncated before
    corrupt(
        "prof-pid",
        "profile.tsv",
        b"4294967297\t1\t0\tu\t0\t10\t0\t5\n",
        &["line 1", "pid"],
    );
}

#[test]
fn counts_that_overflow_are_an_error_not_a_wrap() {
    let max = u64::MAX;
    corrupt(
        "overflow",
        "profile.tsv",
        format!("7\t7\t0\tu\t0\t10\t0\t{max}\n7\t7\t0\tu\t0\t20\t0\t{max}\n").as_bytes(),
        &["line 2, field count", "overflow"],
    );
    // the same key twice merges: also checked
    corrupt(
        "overflow-merge",
        "profile.tsv",
        format!("7\t7\t0\tu\t0\t10\t0\t{max}\n7\t7\t0\tu\t0\t10\t0\t1\n").as_bytes(),
        &["overflow"],
    );
}

#[test]
fn a_filter_that_matches_nothing_is_no_match() {
    let d = tmpdir("nomatch");
    session(&d, "/bin/true", 2);
    let e = report::report(
        &d,
        &ReportOpts {
            pid: Some(999_999),
            ..Default::default()
        },
    )
    .expect_err("no samples of pid 999999");
    assert!(
        matches!(e, Error::NoMatch { ref filter, .. } if filter == "--pid 999999"),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("no samples match --pid 999999"),
        "{e}"
    );
    // an existing process still reports
    let r = report::report(
        &d,
        &ReportOpts {
            pid: Some(7),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.total, 6);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn every_session_file_is_checked_at_load() {
    corrupt("meta", "meta.json", b"{\"format\": 1", &["line 1"]);
    corrupt(
        "images",
        "images.json",
        b"[{\"path\": \"rel\", \"kind\": \"elf\", \"build_id\": null}]",
        &["entry [0], field path"],
    );
    corrupt(
        "procs",
        "processes.json",
        b"[{\"pid\": 1, \"ppid\": 0, \"comm\": \"a\", \"exe\": null, \"exited\": false, \"mantle\": false},
           {\"pid\": 1, \"ppid\": 0, \"comm\": \"b\", \"exe\": null, \"exited\": false, \"mantle\": false}]",
        &["entry [1], field pid"],
    );
    corrupt("kallsyms", "kallsyms.gz", b"not gzip", &["gzip"]);
    // a session that says it has kernel symbols needs kallsyms.gz
    let d = tmpdir("kallsyms-missing");
    session(&d, "/bin/true", 1);
    std::fs::remove_file(d.join("kallsyms.gz")).unwrap();
    let e = read_session(&d).err().expect("missing kallsyms.gz");
    assert!(e.to_string().contains("kallsyms.gz"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}
