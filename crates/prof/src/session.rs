//! A session on disk (documented in docs/prof.md):
//!
//! ```text
//! SESSION/
//!   meta.json        event, rate, duration, CPUs, fallback, lost, throttled
//!   profile.tsv      the merged profile: one line per
//!                    (pid, tid, cpu, mode, image, offset, tags) with a
//!                    count, a stack index and a cgroup id
//!   stacks.tsv       the stack table (callers, nearest first)
//!   images.json      image table (index = the image column of profile.tsv)
//!   processes.json   pid, ppid, comm, exe, exited, mantle
//!   mappings.tsv     every executable mapping seen while recording
//!   tags.json        the tag table's names at record time (bit -> name)
//!   cgroups.tsv      cgroup v2 id -> path (the profile's cgroup column),
//!                    resolved while recording
//!   kallsyms.gz      kernel text symbols at record time
//!   vdso.so          the vDSO image
//!   jit/perf-PID.map JIT symbol maps found while recording
//!   offcpu.tsv       record --off-cpu: blocked time per (pid, tid, leaf,
//!                    stack), in ns, with the number of blocks (the
//!                    stacks and images are the tables above)
//! ```

use crate::files;
use crate::model::{ImageKind, Kallsyms, Mapping, Meta, Mode, Process, Profile, TagName};
use crate::parse::{self, ParseError};
use crate::symbols::JitMap;
use crate::Error;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

/// 2: call stacks (stacks.tsv, the stack column of profile.tsv).
pub const FORMAT: u32 = 2;
pub const DEFAULT_DIR: &str = "mantle.prof";

/// Largest JSON file or JIT map read from a session.
pub const JSON_MAX: u64 = 256 << 20;
/// Largest profile.tsv or mappings.tsv read from a session.
pub const TABLE_MAX: u64 = 1 << 30;
/// Largest kallsyms.gz read (its decompressed size has its own limit).
pub const KALLSYMS_GZ_MAX: u64 = 128 << 20;

fn ioerr(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn write(path: &Path, data: &[u8]) -> Result<(), Error> {
    std::fs::write(path, data).map_err(|e| ioerr("write", path, e))
}

fn json<T: serde::Serialize + ?Sized>(path: &Path, v: &T) -> Result<(), Error> {
    let s = serde_json::to_vec_pretty(v).expect("serializable");
    write(path, &s)
}

/// Everything a session holds, in memory, validated.
pub struct Session {
    pub dir: PathBuf,
    pub meta: Meta,
    pub profile: Profile,
    pub procs: HashMap<u32, Process>,
    pub tags: Vec<TagName>,
    pub kallsyms: Kallsyms,
    /// Every executable mapping seen while recording.
    pub mappings: Vec<(u32, Mapping)>,
    /// The vDSO image (checked by [`parse::elf_image`]), when recorded.
    pub vdso: Option<Vec<u8>>,
    /// The JIT map of every JIT image's process.
    pub jit: HashMap<u32, JitMap>,
    /// Cgroup v2 id -> path (cgroups.tsv; empty in older sessions).
    pub cgroups: HashMap<u64, String>,
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
    /// Cgroup v2 id -> path of the cgroups the rows name.
    pub cgroups: &'a [(u64, String)],
    /// `record --off-cpu`: the blocked time (offcpu.tsv).
    pub off_cpu: Option<&'a crate::model::OffCpu>,
}

/// Whether `dir` can take a new session: it does not exist, or `force` is
/// given and it is a session directory (it has a meta.json) or an empty
/// directory. Anything else is never replaced: `--force` with a mistyped
/// `-o` must not remove someone's directory. Checked before recording and
/// again when writing.
pub fn check_output(dir: &Path, force: bool) -> Result<(), Error> {
    let m = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ioerr("stat", dir, e)),
    };
    let shown = dir.display().to_string();
    if !force {
        return Err(Error::SessionExists(shown));
    }
    if !m.is_dir() {
        return Err(Error::NotASession(shown));
    }
    let meta = std::fs::symlink_metadata(dir.join("meta.json"));
    let empty = std::fs::read_dir(dir)
        .map_err(|e| ioerr("read", dir, e))?
        .next()
        .is_none();
    if empty || meta.is_ok_and(|m| m.is_file()) {
        Ok(())
    } else {
        Err(Error::NotASession(shown))
    }
}

/// Whether a session can be written at `dir` at all, checked before
/// recording (perf fails at once; a recording found unwritable only at the
/// end is lost): its parent must be an existing directory in which this
/// process can create one, tried by creating (and removing) the temporary
/// sibling the session will be written to. Parents are never created: a
/// mistyped `-o /nonexistent/dir/s` is an error, not a new tree.
pub fn check_writable(dir: &Path) -> Result<(), Error> {
    let probe = sibling(dir, "probe");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&probe)
        .map_err(|e| {
            let parent = probe.parent().unwrap_or(Path::new("."));
            ioerr("create a session in", parent, e)
        })?;
    std::fs::remove_dir(&probe).map_err(|e| ioerr("remove", &probe, e))
}

/// A sibling of `dir` (same file system, so rename works) for `what`.
fn sibling(dir: &Path, what: &str) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| DEFAULT_DIR.into());
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    parent.join(format!(".{name}.{what}-{}", std::process::id()))
}

/// Writes a session directory. The files go to a temporary sibling that
/// is renamed to `dir` when complete, so a failed write leaves no half
/// session, and with `replace` the old session is removed only after the
/// new one is complete. Without `replace`, an existing `dir` is an error
/// ([`Error::SessionExists`]); with it, only a session or an empty
/// directory is replaced (see [`check_output`]).
pub fn write_session(dir: &Path, d: &SessionData, replace: bool) -> Result<(), Error> {
    check_output(dir, replace)?;
    let tmp = sibling(dir, "new");
    // parents are not created (check_writable)
    let _ = std::fs::remove_dir_all(&tmp);
    // 0700, as perf writes perf.data 0600: a session holds kernel
    // addresses (kallsyms.gz, kernel samples and stacks) that
    // kptr_restrict hides from other users; chown or chmod it to share
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&tmp)
        .map_err(|e| ioerr("create", &tmp, e))?;
    let r = write_files(&tmp, d).and_then(|()| install(&tmp, dir, replace));
    if r.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    r
}

/// Moves the complete session `tmp` to `dir`.
fn install(tmp: &Path, dir: &Path, replace: bool) -> Result<(), Error> {
    // checked again: the recording may have lasted long
    check_output(dir, replace)?;
    if dir.exists() {
        let old = sibling(dir, "old");
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(dir, &old).map_err(|e| ioerr("move aside", dir, e))?;
        if let Err(e) = std::fs::rename(tmp, dir) {
            let _ = std::fs::rename(&old, dir);
            return Err(ioerr("rename", tmp, e));
        }
        let _ = std::fs::remove_dir_all(&old);
        return Ok(());
    }
    std::fs::rename(tmp, dir).map_err(|e| match e.raw_os_error() {
        // created by someone else since the check
        Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => {
            Error::SessionExists(dir.display().to_string())
        }
        _ => ioerr("rename", tmp, e),
    })
}

fn write_files(dir: &Path, d: &SessionData) -> Result<(), Error> {
    json(&dir.join("meta.json"), d.meta)?;
    json(&dir.join("images.json"), &d.profile.images)?;
    let mut procs: Vec<&Process> = d.procs.values().collect();
    procs.sort_by_key(|p| p.pid);
    json(&dir.join("processes.json"), &procs)?;
    json(&dir.join("tags.json"), d.tags)?;

    let mut st = String::from("# id\tframes (image:offset, nearest caller first)\n");
    for (id, frames) in d.profile.stacks().iter().enumerate().skip(1) {
        let _ = write!(st, "{id}\t");
        for (i, f) in frames.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(st, "{sep}{}:{:x}", f.image, f.offset);
        }
        st.push('\n');
    }
    write(&dir.join("stacks.tsv"), st.as_bytes())?;

    let mut s = String::from("# pid\ttid\tcpu\tmode\timage\toffset\ttags\tcount\tstack\tcgroup\n");
    for (k, n) in d.profile.sorted_rows() {
        let _ = writeln!(
            s,
            "{}\t{}\t{}\t{}\t{}\t{:x}\t{}\t{}\t{}\t{}",
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
            n,
            k.stack,
            k.cgroup
        );
    }
    write(&dir.join("profile.tsv"), s.as_bytes())?;

    let mut c = String::from("# id\tpath (cgroup v2, relative to its mount)\n");
    for (id, path) in d.cgroups {
        let _ = writeln!(c, "{id}\t{}", parse::escape_field(path));
    }
    write(&dir.join("cgroups.tsv"), c.as_bytes())?;

    let mut m = String::from("# pid\tstart\tend\tpgoff\tbuild_id\tpath\n");
    for (pid, mp) in d.history {
        let _ = writeln!(
            m,
            "{pid}\t{:x}\t{:x}\t{:x}\t{}\t{}",
            mp.start,
            mp.end,
            mp.pgoff,
            mp.build_id.as_deref().unwrap_or("-"),
            parse::escape_field(&mp.path)
        );
    }
    write(&dir.join("mappings.tsv"), m.as_bytes())?;

    if let Some(text) = d.kallsyms_text {
        let ks = dir.join("kallsyms.gz");
        let f = std::fs::File::create(&ks).map_err(|e| ioerr("create", &ks, e))?;
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        gz.write_all(text.as_bytes())
            .and_then(|_| gz.finish().map(|_| ()))
            .map_err(|e| ioerr("write", &ks, e))?;
    }
    if let Some(v) = d.vdso {
        write(&dir.join("vdso.so"), v)?;
    }
    if let Some(off) = d.off_cpu {
        let mut s = String::from(crate::model::offcpu::HEADER);
        for (k, t) in off.sorted_rows() {
            s.push_str(&crate::model::offcpu::format_line(&k, &t));
            s.push('\n');
        }
        write(&dir.join("offcpu.tsv"), s.as_bytes())?;
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

/// Reads one file of a session (regular files only, never blocking).
fn load(dir: &Path, name: &str, limit: u64) -> Result<Vec<u8>, Error> {
    let p = dir.join(name);
    files::read_regular(&p, limit).map_err(|e| Error::open(&p, e))
}

/// Like [`load`]; None when the file does not exist.
fn load_optional(dir: &Path, name: &str, limit: u64) -> Result<Option<Vec<u8>>, Error> {
    let p = dir.join(name);
    match files::read_regular(&p, limit) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(Error::open(&p, e)),
    }
}

fn corrupt(dir: &Path, name: &str) -> impl FnOnce(ParseError) -> Error {
    let file = dir.join(name);
    move |source| Error::Corrupt { file, source }
}

/// A session's files but its two tables (profile.tsv and stacks.tsv),
/// read and validated.
pub struct Head {
    pub dir: PathBuf,
    pub meta: Meta,
    pub images: Vec<crate::model::Image>,
    pub procs: HashMap<u32, Process>,
    pub tags: Vec<TagName>,
    pub kallsyms: Kallsyms,
    pub mappings: Vec<(u32, Mapping)>,
    pub vdso: Option<Vec<u8>>,
    pub jit: HashMap<u32, JitMap>,
    /// Cgroup v2 id -> path (cgroups.tsv; empty in older sessions).
    pub cgroups: HashMap<u64, String>,
}

/// Reads and validates every file of a session but profile.tsv and
/// stacks.tsv (see [`read_session`], [`stream_tables`]).
pub fn read_head(dir: &Path) -> Result<Head, Error> {
    let meta = match load_optional(dir, "meta.json", JSON_MAX)? {
        Some(b) => parse::meta(&b).map_err(corrupt(dir, "meta.json"))?,
        None => return Err(Error::NoSession(dir.display().to_string())),
    };
    let images =
        parse::images(&load(dir, "images.json", JSON_MAX)?).map_err(corrupt(dir, "images.json"))?;
    let procs = parse::processes(&load(dir, "processes.json", JSON_MAX)?)
        .map_err(corrupt(dir, "processes.json"))?;
    let tags =
        parse::tags(&load(dir, "tags.json", JSON_MAX)?).map_err(corrupt(dir, "tags.json"))?;
    let jit_pids: Vec<u32> = images
        .iter()
        .filter(|i| i.kind == ImageKind::Jit)
        .filter_map(|i| i.pid)
        .collect();
    let mappings = parse::mappings(&load(dir, "mappings.tsv", TABLE_MAX)?)
        .map_err(corrupt(dir, "mappings.tsv"))?;
    let kallsyms = match load_optional(dir, "kallsyms.gz", KALLSYMS_GZ_MAX)? {
        Some(b) => parse::kallsyms_gz(&b).map_err(corrupt(dir, "kallsyms.gz"))?,
        None if meta.kernel_symbols => {
            return Err(Error::Corrupt {
                file: dir.join("kallsyms.gz"),
                source: ParseError::new(
                    parse::At::File,
                    "missing, but meta.json says kernel symbols were recorded",
                ),
            })
        }
        None => Kallsyms::default(),
    };
    let vdso = match load_optional(dir, "vdso.so", parse::VDSO_MAX)? {
        Some(b) => {
            parse::elf_image(&b).map_err(corrupt(dir, "vdso.so"))?;
            Some(b)
        }
        None => None,
    };
    let cgroups = match load_optional(dir, "cgroups.tsv", TABLE_MAX)? {
        Some(b) => parse::cgroups(&b).map_err(corrupt(dir, "cgroups.tsv"))?,
        None => HashMap::new(),
    };
    let mut jit = HashMap::new();
    for pid in jit_pids {
        let name = format!("jit/perf-{pid}.map");
        let m = parse::jit_map(&load(dir, &name, JSON_MAX)?).map_err(corrupt(dir, &name))?;
        jit.insert(pid, m);
    }
    Ok(Head {
        dir: dir.to_path_buf(),
        meta,
        images,
        procs: procs.into_iter().map(|p| (p.pid, p)).collect(),
        tags,
        kallsyms,
        mappings,
        vdso,
        jit,
        cgroups,
    })
}

/// Calls `f` with each data line of a table (1-based line number),
/// reading it a line at a time (regular files only, at most `limit`
/// bytes). Returns false when the file does not exist.
fn for_each_line(
    dir: &Path,
    name: &str,
    limit: u64,
    f: &mut dyn FnMut(usize, &str) -> Result<(), ParseError>,
) -> Result<bool, Error> {
    use std::io::{BufRead, Read};
    let p = dir.join(name);
    let file = match files::open_regular(&p) {
        Ok(file) => file,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(Error::open(&p, e)),
    };
    let len = file.metadata().map_err(|e| ioerr("read", &p, e))?.len();
    if len > limit {
        return Err(Error::TooLarge { path: p, limit });
    }
    // take(): the file may grow after the fstat
    let mut r = std::io::BufReader::with_capacity(1 << 20, file.take(limit + 1));
    let mut buf = Vec::new();
    let mut n = 0usize;
    let mut read = 0u64;
    loop {
        buf.clear();
        let got = r
            .read_until(b'\n', &mut buf)
            .map_err(|e| ioerr("read", &p, e))?;
        if got == 0 {
            return Ok(true);
        }
        read += got as u64;
        if read > limit {
            return Err(Error::TooLarge { path: p, limit });
        }
        n += 1;
        let line = std::str::from_utf8(&buf)
            .map_err(|_| ParseError::new(parse::At::Line(n), "not UTF-8 text"))
            .map_err(corrupt(dir, name))?;
        // as str::lines: without the newline and a carriage return before it
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if parse::is_data_line(line) {
            f(n, line).map_err(corrupt(dir, name))?;
        }
    }
}

/// Streams stacks.tsv, then offcpu.tsv, into a report builder of the
/// off-CPU half (counts in ns), and sums each thread's blocked time
/// (kept whatever the builder's filter). None when the session has no
/// offcpu.tsv (recorded without --off-cpu).
pub fn stream_offcpu(
    head: &Head,
    b: &mut crate::model::ReportBuilder,
) -> Result<Option<crate::model::OffCpu>, Error> {
    let dir = &head.dir;
    if !dir.join("offcpu.tsv").exists() && head.meta.off_cpu.is_none() {
        return Ok(None);
    }
    let n_images = head.images.len();
    let mut frames = Vec::new();
    for_each_line(dir, "stacks.tsv", TABLE_MAX, &mut |n, line| {
        parse::stack_line(n, line, n_images, b.stacks(), &mut frames)?;
        b.add_stack(&frames)
            .map(|_| ())
            .map_err(|e| ParseError::new(parse::At::Line(n), e.to_string()))
    })?;
    let n_stacks = b.stacks();
    let words = crate::abi::MT_WORDS;
    let mut off = crate::model::OffCpu::default();
    let found = for_each_line(dir, "offcpu.tsv", TABLE_MAX, &mut |n, line| {
        let (k, t) = crate::model::offcpu::parse_line(n, line, n_images, n_stacks)?;
        let at = || parse::At::Field(n, "ns");
        off.add(k, t.ns, t.blocks)
            .map_err(|e| ParseError::new(at(), e.to_string()))?;
        b.add_row(&k.row_key(words), t.ns)
            .map_err(|e| ParseError::new(at(), e.to_string()))
    })?;
    if !found {
        return Err(Error::Corrupt {
            file: dir.join("offcpu.tsv"),
            source: ParseError::new(
                parse::At::File,
                "missing, but meta.json says off-CPU time was recorded",
            ),
        });
    }
    Ok(Some(off))
}

/// Streams stacks.tsv, then profile.tsv, into a report builder, a line at
/// a time: neither file is ever whole in memory.
pub fn stream_tables(head: &Head, b: &mut crate::model::ReportBuilder) -> Result<(), Error> {
    let dir = &head.dir;
    let n_images = head.images.len();
    let mut frames = Vec::new();
    // format 1 had no stacks: no file, every row stack 0
    for_each_line(dir, "stacks.tsv", TABLE_MAX, &mut |n, line| {
        parse::stack_line(n, line, n_images, b.stacks(), &mut frames)?;
        b.add_stack(&frames)
            .map(|_| ())
            .map_err(|e| ParseError::new(parse::At::Line(n), e.to_string()))
    })?;
    let n_stacks = b.stacks();
    let words = crate::abi::MT_WORDS;
    let found = for_each_line(dir, "profile.tsv", TABLE_MAX, &mut |n, line| {
        let (key, count) = parse::profile_line(n, line, n_images, n_stacks, words)?;
        b.add_row(&key, count)
            .map_err(|e| ParseError::new(parse::At::Field(n, "count"), e.to_string()))
    })?;
    if !found {
        let p = dir.join("profile.tsv");
        return Err(Error::open(
            &p,
            files::OpenError::Io(std::io::Error::from(std::io::ErrorKind::NotFound)),
        ));
    }
    Ok(())
}

/// Reads and validates a session directory: every file is checked here,
/// once, so that what follows (symbols) works on sound data. Holds the
/// whole profile in memory: reports stream it instead ([`read_head`],
/// [`stream_tables`]).
pub fn read_session(dir: &Path) -> Result<Session, Error> {
    let h = read_head(dir)?;
    // format 1 had no stacks: no file, every row stack 0
    let stacks = match load_optional(dir, "stacks.tsv", TABLE_MAX)? {
        Some(b) => parse::stacks(&b, h.images.len()).map_err(corrupt(dir, "stacks.tsv"))?,
        None => vec![Vec::new()],
    };
    let profile = parse::profile(
        &load(dir, "profile.tsv", TABLE_MAX)?,
        h.images,
        stacks,
        crate::abi::MT_WORDS,
    )
    .map_err(corrupt(dir, "profile.tsv"))?;
    Ok(Session {
        dir: h.dir,
        meta: h.meta,
        profile,
        procs: h.procs,
        tags: h.tags,
        kallsyms: h.kallsyms,
        mappings: h.mappings,
        vdso: h.vdso,
        jit: h.jit,
        cgroups: h.cgroups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AddressSpaces, ImageKind, RawSample};

    #[test]
    fn roundtrip() {
        let dir = std::env::temp_dir().join(format!("mantle-prof-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut sp = AddressSpaces::new(vec![]);
        sp.add_process(5, 1, "w");
        // a file name with a tab and a newline stays one mappings.tsv line
        sp.mmap(
            5,
            Mapping {
                start: 0x3000,
                end: 0x4000,
                pgoff: 0x1000,
                path: "/tmp/a\tb\nc".into(),
                build_id: None,
            },
        );
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
                cgroup: 42,
            },
            7,
        )
        .unwrap();
        // a kernel sample called from user code: a stack of two images
        let raw = RawSample {
            pid: 5,
            tid: 5,
            cpu: 0,
            mode: Mode::Kernel,
            ip: 0xffffffff81000000,
            tags: vec![0; words],
            cgroup: 0,
        };
        let stack = p.add_stack(&sp, 5, &[0xffffffff81000100, 0x1020, 0x3010], &mut |_| {});
        assert_eq!(stack, 1);
        let r = sp.resolve(5, raw.ip, raw.mode);
        p.add_resolved(&raw, &r, stack, 2).unwrap();
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
                cgroups: &[(42, "/a\tb/c".into())],
                off_cpu: None,
            },
            false,
        )
        .unwrap();
        let s = read_session(&dir).unwrap();
        assert_eq!(s.meta.samples, 9);
        // missing parents are not created
        let deep = dir.join("a/b/s");
        assert!(check_writable(&deep).is_err());
        assert!(write_session(
            &deep,
            &SessionData {
                meta: &meta,
                profile: &p,
                procs: &sp.procs,
                history: &sp.history,
                tags: &names,
                kallsyms_text: None,
                vdso: None,
                jit_maps: &[],
                cgroups: &[],
                off_cpu: None,
            },
            false,
        )
        .is_err());
        assert!(!dir.join("a").exists());
        // in an existing directory: nothing is left beside the session
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        check_writable(&deep).unwrap();
        write_session(
            &deep,
            &SessionData {
                meta: &meta,
                profile: &p,
                procs: &sp.procs,
                history: &sp.history,
                tags: &names,
                kallsyms_text: None,
                vdso: None,
                jit_maps: &[],
                cgroups: &[],
                off_cpu: None,
            },
            false,
        )
        .unwrap();
        read_session(&deep).unwrap();
        let beside: Vec<_> = std::fs::read_dir(dir.join("a/b")).unwrap().collect();
        assert_eq!(beside.len(), 1);
        assert_eq!(s.profile.total(), 9);
        assert_eq!(s.profile.stacks(), p.stacks());
        assert_eq!(s.profile.stack(1).len(), 3);
        assert_eq!(s.profile.counts(), p.counts());
        assert_eq!(s.mappings, sp.history);
        assert_eq!(s.profile.images[0].kind, ImageKind::Elf);
        assert_eq!(s.procs[&5].comm, "w");
        assert_eq!(s.tags, names);
        assert_eq!(s.kallsyms.lookup(0xffffffff81000001), Some("_stext"));
        assert!(dir.join("jit/perf-5.map").exists());
        assert_eq!(s.cgroups[&42], "/a\tb/c");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(read_session(&dir), Err(Error::NoSession(_))));
    }

    #[test]
    fn malformed_stacks() {
        let ok = parse::stacks(b"# id\tframes\n1\t0:10,1:20\n2\t1:5\n", 2).unwrap();
        assert_eq!(ok.len(), 3);
        assert!(ok[0].is_empty());
        let err = |b: &[u8]| parse::stacks(b, 2).unwrap_err().to_string();
        assert!(err(b"2\t0:10\n").contains("stack 1 expected"));
        assert!(err(b"1\t2:10\n").contains("not in images.json"));
        assert!(err(b"1\t0:10\n2\t0:10\n").contains("the same stack twice"));
        assert!(err(b"1\t0-10\n").contains("not image:offset"));
        assert!(err(b"1\t0:zz\n").contains("frames"));
        assert!(err(b"1\t\n").contains("frames"));
        let long = format!("1\t{}\n", vec!["0:1"; parse::STACK_MAX + 1].join(","));
        assert!(err(long.as_bytes()).contains("more than"));
        // a row naming a stack the table does not have
        let e = parse::profile(
            b"1\t1\t0\tu\t0\t10\t0\t5\t1\n",
            vec![img()],
            ok[..1].to_vec(),
            1,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("field stack"), "{e}");
        let p =
            parse::profile(b"1\t1\t0\tu\t0\t10\t0\t5\t2\n", vec![img(), img2()], ok, 1).unwrap();
        assert_eq!(p.counts().keys().next().unwrap().stack, 2);
    }

    fn img() -> crate::model::Image {
        crate::model::Image::named("/bin/x", ImageKind::Elf)
    }

    fn img2() -> crate::model::Image {
        crate::model::Image::named("/bin/y", ImageKind::Elf)
    }

    #[test]
    fn malformed_profile() {
        assert!(parse::profile(b"1\t2\n", vec![], vec![], 1).is_err());
        assert!(parse::profile(b"1\t1\t0\tu\t0\t10\t0\t5\n", vec![], vec![], 1).is_err());
        // the cgroup column: decimal; 11 fields are too many
        let p =
            parse::profile(b"1\t1\t0\tu\t0\t10\t0\t5\t0\t77\n", vec![img()], vec![], 1).unwrap();
        assert_eq!(p.counts().keys().next().unwrap().cgroup, 77);
        for bad in [
            &b"1\t1\t0\tu\t0\t10\t0\t5\t0\tx\n"[..],
            b"1\t1\t0\tu\t0\t10\t0\t5\t0\t-1\n",
            b"1\t1\t0\tu\t0\t10\t0\t5\t0\t1\t1\n",
        ] {
            let e = parse::profile(bad, vec![img()], vec![], 1).unwrap_err();
            assert!(
                e.to_string().contains("cgroup") || e.to_string().contains("fields"),
                "{e}"
            );
        }
    }

    #[test]
    fn malformed_cgroups() {
        let ok = parse::cgroups(b"# id\tpath\n5\t/\n7\t/a\\tb\n").unwrap();
        assert_eq!((ok[&5].as_str(), ok[&7].as_str()), ("/", "/a\tb"));
        for bad in [
            &b"5\n"[..],
            b"x\t/a\n",
            b"5\trel\n",
            b"5\t/a\n5\t/b\n",
            b"5\t\n",
        ] {
            assert!(
                parse::cgroups(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn output_is_replaced_only_with_force_and_only_if_a_session() {
        let d = std::env::temp_dir().join(format!("mantle-prof-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let s = d.join("s");
        check_output(&s, false).unwrap();
        std::fs::create_dir(&s).unwrap();
        // empty: replaceable with --force only
        assert!(matches!(
            check_output(&s, false),
            Err(Error::SessionExists(_))
        ));
        check_output(&s, true).unwrap();
        std::fs::write(s.join("notes.txt"), b"mine").unwrap();
        assert!(matches!(check_output(&s, true), Err(Error::NotASession(_))));
        std::fs::write(s.join("meta.json"), b"{}").unwrap();
        check_output(&s, true).unwrap();
        let f = d.join("file");
        std::fs::write(&f, b"x").unwrap();
        assert!(matches!(check_output(&f, true), Err(Error::NotASession(_))));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
