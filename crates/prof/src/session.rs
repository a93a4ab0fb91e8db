//! A session on disk (documented in docs/prof.md):
//!
//! ```text
//! SESSION/
//!   meta.json        event, rate, duration, CPUs, fallback, lost, throttled
//!   profile.tsv      the merged profile: one line per
//!                    (pid, tid, cpu, mode, image, offset, tags) with a count
//!   images.json      image table (index = the image column of profile.tsv)
//!   processes.json   pid, ppid, comm, exe, exited, mantle
//!   mappings.tsv     every executable mapping seen while recording
//!   tags.json        the tag table's names at record time (bit -> name)
//!   kallsyms.gz      kernel text symbols at record time
//!   vdso.so          the vDSO image
//!   jit/perf-PID.map JIT symbol maps found while recording
//! ```

use crate::model::{Image, Kallsyms, Mapping, Meta, Mode, Process, Profile, RowKey, TagName};
use crate::Error;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub const FORMAT: u32 = 1;
pub const DEFAULT_DIR: &str = "mantle.prof";

fn ioerr(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Session(format!("{what} {}: {e}", path.display()))
}

fn write(path: &Path, data: &[u8]) -> Result<(), Error> {
    std::fs::write(path, data).map_err(|e| ioerr("write", path, e))
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NoSession(path.display().to_string()),
        _ => ioerr("read", path, e),
    })
}

fn json<T: serde::Serialize>(path: &Path, v: &T) -> Result<(), Error> {
    let s = serde_json::to_vec_pretty(v).expect("serializable");
    write(path, &s)
}

fn from_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Error> {
    serde_json::from_slice(&read(path)?).map_err(|e| ioerr("parse", path, e))
}

/// Everything a session holds, in memory.
pub struct Session {
    pub dir: PathBuf,
    pub meta: Meta,
    pub profile: Profile,
    pub procs: HashMap<u32, Process>,
    pub tags: Vec<TagName>,
    pub kallsyms: Kallsyms,
}

/// What the recorder hands over to be written.
pub struct SessionData<'a> {
    pub meta: &'a Meta,
    pub profile: &'a Profile,
    pub procs: &'a HashMap<u32, Process>,
    pub history: &'a [(u32, Mapping)],
    pub tags: &'a [TagName],
    pub kallsyms_text: Option<&'a str>,
    pub vdso: Option<&'a [u8]>,
    pub jit_maps: &'a [(u32, String)],
}

/// Writes a session directory (replacing the files of an older one).
pub fn write_session(dir: &Path, d: &SessionData) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| ioerr("create", dir, e))?;
    json(&dir.join("meta.json"), d.meta)?;
    json(&dir.join("images.json"), &d.profile.images)?;
    let mut procs: Vec<&Process> = d.procs.values().collect();
    procs.sort_by_key(|p| p.pid);
    json(&dir.join("processes.json"), &procs)?;
    json(&dir.join("tags.json"), &d.tags)?;

    let mut s = String::from("# pid\ttid\tcpu\tmode\timage\toffset\ttags\tcount\n");
    for (k, n) in d.profile.sorted_rows() {
        let _ = writeln!(
            s,
            "{}\t{}\t{}\t{}\t{}\t{:x}\t{}\t{}",
            k.pid,
            k.tid,
            k.cpu,
            match k.mode {
                Mode::User => "u",
                Mode::Kernel => "k",
            },
            k.image,
            k.offset,
            crate::model::tags_hex(&k.tags),
            n
        );
    }
    write(&dir.join("profile.tsv"), s.as_bytes())?;

    let mut m = String::from("# pid\tstart\tend\tpgoff\tbuild_id\tpath\n");
    for (pid, mp) in d.history {
        let _ = writeln!(
            m,
            "{pid}\t{:x}\t{:x}\t{:x}\t{}\t{}",
            mp.start,
            mp.end,
            mp.pgoff,
            mp.build_id.as_deref().unwrap_or("-"),
            mp.path
        );
    }
    write(&dir.join("mappings.tsv"), m.as_bytes())?;

    let ks = dir.join("kallsyms.gz");
    if let Some(text) = d.kallsyms_text {
        let f = std::fs::File::create(&ks).map_err(|e| ioerr("create", &ks, e))?;
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        gz.write_all(text.as_bytes())
            .and_then(|_| gz.finish().map(|_| ()))
            .map_err(|e| ioerr("write", &ks, e))?;
    } else {
        let _ = std::fs::remove_file(&ks);
    }
    if let Some(v) = d.vdso {
        write(&dir.join("vdso.so"), v)?;
    }
    if !d.jit_maps.is_empty() {
        let jd = dir.join("jit");
        std::fs::create_dir_all(&jd).map_err(|e| ioerr("create", &jd, e))?;
        for (pid, text) in d.jit_maps {
            write(&jd.join(format!("perf-{pid}.map")), text.as_bytes())?;
        }
    }
    Ok(())
}

/// Parses profile.tsv.
pub fn parse_profile(text: &str, images: Vec<Image>, words: usize) -> Result<Profile, String> {
    let mut p = Profile::with_images(images);
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let bad = || format!("profile.tsv line {}: malformed", n + 1);
        if f.len() != 8 {
            return Err(bad());
        }
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let key = RowKey {
            pid: num(f[0])? as u32,
            tid: num(f[1])? as u32,
            cpu: num(f[2])? as u32,
            mode: match f[3] {
                "u" => Mode::User,
                "k" => Mode::Kernel,
                _ => return Err(bad()),
            },
            image: num(f[4])? as u32,
            offset: u64::from_str_radix(f[5], 16).map_err(|_| bad())?,
            tags: crate::model::parse_tags_hex(f[6], words).ok_or_else(bad)?,
        };
        if key.image as usize >= p.images.len() {
            return Err(format!(
                "profile.tsv line {}: image {} not in images.json",
                n + 1,
                key.image
            ));
        }
        p.add_row(key, num(f[7])?);
    }
    Ok(p)
}

/// Reads a session directory.
pub fn read_session(dir: &Path) -> Result<Session, Error> {
    if !dir.join("meta.json").exists() {
        return Err(Error::NoSession(dir.display().to_string()));
    }
    let meta: Meta = from_json(&dir.join("meta.json"))?;
    if meta.format > FORMAT {
        return Err(Error::Session(format!(
            "{}: session format {} is newer than this mantle understands ({FORMAT})",
            dir.display(),
            meta.format
        )));
    }
    let images: Vec<Image> = from_json(&dir.join("images.json"))?;
    let procs: Vec<Process> = from_json(&dir.join("processes.json"))?;
    let tags: Vec<TagName> = from_json(&dir.join("tags.json")).unwrap_or_default();
    let text = String::from_utf8_lossy(&read(&dir.join("profile.tsv"))?).into_owned();
    let profile = parse_profile(&text, images, crate::abi::MT_WORDS)
        .map_err(|e| Error::Session(format!("{}: {e}", dir.display())))?;
    let ks = dir.join("kallsyms.gz");
    let kallsyms = if ks.exists() {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&read(&ks)?[..])
            .read_to_string(&mut s)
            .map_err(|e| ioerr("read", &ks, e))?;
        Kallsyms::parse(&s)
    } else {
        Kallsyms::default()
    };
    Ok(Session {
        dir: dir.to_path_buf(),
        meta,
        profile,
        procs: procs.into_iter().map(|p| (p.pid, p)).collect(),
        tags,
        kallsyms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AddressSpaces, ImageKind, RawSample};

    #[test]
    fn roundtrip() {
        let dir = std::env::temp_dir().join(format!("mantle-prof-test-{}", std::process::id()));
        let mut sp = AddressSpaces::new(vec![]);
        sp.add_process(5, 1, "w");
        sp.mmap(
            5,
            Mapping {
                start: 0x1000,
                end: 0x2000,
                pgoff: 0,
                path: "/bin/w".into(),
                build_id: Some("beef".into()),
            },
        );
        let mut p = Profile::default();
        let words = crate::abi::MT_WORDS;
        let mut tags = vec![0u64; words];
        tags[0] = 3;
        p.add(
            &sp,
            &RawSample {
                pid: 5,
                tid: 6,
                cpu: 1,
                mode: Mode::User,
                ip: 0x1010,
                tags: tags.clone(),
            },
            7,
        );
        p.add(
            &sp,
            &RawSample {
                pid: 5,
                tid: 5,
                cpu: 0,
                mode: Mode::Kernel,
                ip: 0xffffffff81000000,
                tags: vec![0; words],
            },
            2,
        );
        let meta = Meta {
            format: FORMAT,
            event: "cpu-clock".into(),
            samples: 9,
            ..Default::default()
        };
        let names = vec![TagName {
            bit: 0,
            name: "a".into(),
        }];
        write_session(
            &dir,
            &SessionData {
                meta: &meta,
                profile: &p,
                procs: &sp.procs,
                history: &sp.history,
                tags: &names,
                kallsyms_text: Some("ffffffff81000000 T _stext\n"),
                vdso: None,
                jit_maps: &[(5, "1000 10 j\n".into())],
            },
        )
        .unwrap();
        let s = read_session(&dir).unwrap();
        assert_eq!(s.meta.samples, 9);
        assert_eq!(s.profile.total(), 9);
        assert_eq!(s.profile.counts, p.counts);
        assert_eq!(s.profile.images[0].kind, ImageKind::Elf);
        assert_eq!(s.procs[&5].comm, "w");
        assert_eq!(s.tags, names);
        assert_eq!(s.kallsyms.lookup(0xffffffff81000001), Some("_stext"));
        assert!(dir.join("jit/perf-5.map").exists());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(read_session(&dir), Err(Error::NoSession(_))));
    }

    #[test]
    fn malformed_profile() {
        assert!(parse_profile("1\t2\n", vec![], 1).is_err());
        assert!(parse_profile("1\t1\t0\tu\t0\t10\t0\t5\n", vec![], 1).is_err());
    }
}
