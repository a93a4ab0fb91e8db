//! Parsers of the session files, pure functions over bytes (no files, no
//! system calls), so that each can be tested and fuzzed alone
//! (crates/prof/fuzz). A session is untrusted input: it may come from
//! another machine or another mantle, or be corrupted. Every parser
//! checks everything the report relies on and says where it is wrong (line
//! and field, or JSON entry and field); [`crate::session::read_session`]
//! adds the file's name. None of them panics on any input, and counts are
//! added with checked arithmetic.

use crate::model::{parse_tags_hex, TagName};
use crate::model::{
    Frame, Image, ImageKind, Kallsyms, Mapping, Meta, Mode, Process, Profile, RowKey,
};
use crate::symbols::JitMap;
use std::collections::HashSet;
use std::fmt;
use std::io::Read;

/// Where in a file a problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At {
    /// The file as a whole.
    File,
    /// A line (1-based).
    Line(usize),
    /// A line and a named field of it.
    Field(usize, &'static str),
    /// A JSON position (1-based line and column).
    Json(usize, usize),
    /// A JSON array entry (0-based index) and a field of it.
    Entry(usize, &'static str),
    /// A byte offset (binary files).
    Offset(u64),
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            At::File => Ok(()),
            At::Line(l) => write!(f, "line {l}: "),
            At::Field(l, n) => write!(f, "line {l}, field {n}: "),
            At::Json(l, c) => write!(f, "line {l}, column {c}: "),
            At::Entry(i, n) => write!(f, "entry [{i}], field {n}: "),
            At::Offset(o) => write!(f, "offset {o:#x}: "),
        }
    }
}

/// A session file that does not parse or does not make sense.
#[derive(Debug, thiserror::Error)]
#[error("{at}{what}")]
pub struct ParseError {
    pub at: At,
    pub what: String,
    /// The underlying parser's error, when there is one (JSON, gzip).
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ParseError {
    pub fn new(at: At, what: impl Into<String>) -> ParseError {
        ParseError {
            at,
            what: what.into(),
            source: None,
        }
    }
}

fn json<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, ParseError> {
    serde_json::from_slice(b).map_err(|e| ParseError {
        at: At::Json(e.line(), e.column()),
        what: format!("invalid JSON for this file ({})", e.classify_name()),
        source: Some(Box::new(e)),
    })
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}
impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "unexpected content",
            serde_json::error::Category::Eof => "truncated",
        }
    }
}

/// Text files must be UTF-8; the error names the line of the first bad byte.
fn utf8(b: &[u8]) -> Result<&str, ParseError> {
    std::str::from_utf8(b).map_err(|e| {
        let line = b[..e.valid_up_to()].iter().filter(|&&c| c == b'\n').count() + 1;
        ParseError::new(At::Line(line), "not UTF-8 text")
    })
}

/// Decimal digits only (str::parse also takes a leading '+').
fn dec<T: std::str::FromStr>(s: &str, at: At) -> Result<T, ParseError> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(ParseError::new(
            at,
            format!("{s:?} is not a decimal number"),
        ));
    }
    s.parse()
        .map_err(|_| ParseError::new(at, format!("{s} is out of range")))
}

/// Hex digits only, at most 16 of them (a u64).
fn hex(s: &str, at: At) -> Result<u64, ParseError> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(ParseError::new(at, format!("{s:?} is not a hex number")));
    }
    u64::from_str_radix(s, 16).map_err(|_| ParseError::new(at, format!("{s} is out of range")))
}

fn is_build_id(s: &str) -> bool {
    !s.is_empty()
        && s.len().is_multiple_of(2)
        && s.len() <= 128
        && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// meta.json. A `format` newer than [`crate::session::FORMAT`] is refused.
pub fn meta(b: &[u8]) -> Result<Meta, ParseError> {
    let m: Meta = json(b)?;
    if m.format == 0 {
        return Err(ParseError::new(At::File, "field format: 0 is not a format"));
    }
    if m.format > crate::session::FORMAT {
        return Err(ParseError::new(
            At::File,
            format!(
                "session format {} is newer than this mantle understands ({})",
                m.format,
                crate::session::FORMAT
            ),
        ));
    }
    if m.event.is_empty() {
        return Err(ParseError::new(At::File, "field event: empty"));
    }
    if m.freq.is_some() && m.period.is_some() {
        return Err(ParseError::new(
            At::File,
            "fields freq and period: only one of them can be set",
        ));
    }
    Ok(m)
}

/// images.json: the image table that profile.tsv indexes.
pub fn images(b: &[u8]) -> Result<Vec<Image>, ParseError> {
    let v: Vec<Image> = json(b)?;
    if v.len() > u32::MAX as usize {
        return Err(ParseError::new(At::File, "more images than a u32 indexes"));
    }
    let mut seen = HashSet::new();
    for (i, im) in v.iter().enumerate() {
        if im.path.is_empty() || im.path.contains('\0') {
            return Err(ParseError::new(
                At::Entry(i, "path"),
                "empty or contains NUL",
            ));
        }
        if im.kind == ImageKind::Elf && !im.path.starts_with('/') {
            return Err(ParseError::new(
                At::Entry(i, "path"),
                format!("{:?}: an ELF image needs an absolute path", im.path),
            ));
        }
        if let Some(id) = &im.build_id {
            if !is_build_id(id) {
                return Err(ParseError::new(
                    At::Entry(i, "build_id"),
                    format!("{id:?} is not a lower-case hex build ID"),
                ));
            }
        }
        match (im.kind, im.pid) {
            (ImageKind::Jit, None) => {
                return Err(ParseError::new(
                    At::Entry(i, "pid"),
                    "a JIT image needs the pid of its map",
                ))
            }
            (k, Some(_)) if k != ImageKind::Jit => {
                return Err(ParseError::new(
                    At::Entry(i, "pid"),
                    "only JIT images have a pid",
                ))
            }
            _ => {}
        }
        if !seen.insert(im) {
            return Err(ParseError::new(
                At::Entry(i, "path"),
                format!("image {:?} appears twice", im.display()),
            ));
        }
    }
    Ok(v)
}

/// processes.json.
pub fn processes(b: &[u8]) -> Result<Vec<Process>, ParseError> {
    let v: Vec<Process> = json(b)?;
    let mut seen = HashSet::new();
    for (i, p) in v.iter().enumerate() {
        if !seen.insert(p.pid) {
            return Err(ParseError::new(
                At::Entry(i, "pid"),
                format!("process {} appears twice", p.pid),
            ));
        }
    }
    Ok(v)
}

/// tags.json: the tag names at record time, one per bit.
pub fn tags(b: &[u8]) -> Result<Vec<TagName>, ParseError> {
    let v: Vec<TagName> = json(b)?;
    let mut seen = HashSet::new();
    for (i, t) in v.iter().enumerate() {
        if t.bit as usize >= crate::abi::MT_TAGS {
            return Err(ParseError::new(
                At::Entry(i, "bit"),
                format!(
                    "bit {} is outside the tag vector (0..{})",
                    t.bit,
                    crate::abi::MT_TAGS
                ),
            ));
        }
        if !seen.insert(t.bit) {
            return Err(ParseError::new(
                At::Entry(i, "bit"),
                format!("bit {} is named twice", t.bit),
            ));
        }
        if t.name.is_empty() {
            return Err(ParseError::new(At::Entry(i, "name"), "empty"));
        }
    }
    Ok(v)
}

/// Lines that carry data: not comments, not blank. (1-based number, line)
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(n, l)| (n + 1, l))
        .filter(|(_, l)| is_data_line(l))
}

/// Longest call stack accepted in stacks.tsv (frames): a kernel and a
/// user stack of `MP_MAX_STACK` each, with room to spare.
pub const STACK_MAX: usize = 1024;

/// One data line of stacks.tsv (line number `n`): `id frames`, the id
/// must be `expect`; the frames go to `out` (cleared first).
pub fn stack_line(
    n: usize,
    line: &str,
    n_images: usize,
    expect: usize,
    out: &mut Vec<Frame>,
) -> Result<(), ParseError> {
    out.clear();
    let (id, frames) = match line.split_once('\t') {
        Some((a, b)) if !b.contains('\t') => (a, b),
        _ => {
            return Err(ParseError::new(
                At::Line(n),
                format!(
                    "{} tab-separated fields, 2 expected",
                    line.split('\t').count()
                ),
            ))
        }
    };
    let id: usize = dec(id, At::Field(n, "id"))?;
    if id != expect {
        return Err(ParseError::new(
            At::Field(n, "id"),
            format!("{id}: stack {expect} expected (ids are 1, 2, 3, ... in order)"),
        ));
    }
    for fr in frames.split(',') {
        let (i, o) = fr.split_once(':').ok_or_else(|| {
            ParseError::new(
                At::Field(n, "frames"),
                format!("{fr:?} is not image:offset"),
            )
        })?;
        let image: u32 = dec(i, At::Field(n, "frames"))?;
        if image as usize >= n_images {
            return Err(ParseError::new(
                At::Field(n, "frames"),
                format!("image {image} is not in images.json ({n_images} images)"),
            ));
        }
        out.push(Frame {
            image,
            offset: hex(o, At::Field(n, "frames"))?,
        });
        if out.len() > STACK_MAX {
            return Err(ParseError::new(
                At::Field(n, "frames"),
                format!("more than {STACK_MAX} frames"),
            ));
        }
    }
    Ok(())
}

/// stacks.tsv, the stack table: `id frames`, ids 1, 2, 3, ... in order,
/// frames `image:offset` (decimal image index, hex offset) separated by
/// commas, nearest caller first. `n_images` is the number of entries of
/// images.json. Returns the table with the empty stack at index 0.
/// (Reports read the file line by line with [`stack_line`].)
pub fn stacks(b: &[u8], n_images: usize) -> Result<Vec<Vec<Frame>>, ParseError> {
    let text = utf8(b)?;
    let mut v: Vec<Vec<Frame>> = vec![Vec::new()];
    let mut seen: HashSet<Vec<Frame>> = HashSet::new();
    let mut frames = Vec::new();
    for (n, line) in data_lines(text) {
        stack_line(n, line, n_images, v.len(), &mut frames)?;
        if !seen.insert(frames.clone()) {
            return Err(ParseError::new(At::Line(n), "the same stack twice"));
        }
        v.push(frames.clone());
    }
    Ok(v)
}

/// One data line of profile.tsv (line number `n`): `pid tid cpu mode
/// image offset tags count stack cgroup` (format 2; format 1 has no stack
/// column: stack 0; sessions before per-sample cgroups have no cgroup
/// column: cgroup 0, unknown), with `n_images` images, `n_stacks` stacks (with the
/// empty stack 0) and tag vectors of `words` words.
pub fn profile_line(
    n: usize,
    line: &str,
    n_images: usize,
    n_stacks: usize,
    words: usize,
) -> Result<(RowKey, u64), ParseError> {
    let mut f = [""; 10];
    let mut nf = 0;
    for (i, x) in line.split('\t').enumerate() {
        if i < 10 {
            f[i] = x;
        }
        nf = i + 1;
    }
    if !(8..=10).contains(&nf) {
        return Err(ParseError::new(
            At::Line(n),
            format!("{nf} tab-separated fields, 10 (or 9 without cgroups, 8 in format 1) expected"),
        ));
    }
    let cgroup: u64 = if nf == 10 {
        dec(f[9], At::Field(n, "cgroup"))?
    } else {
        0
    };
    let stack: u32 = if nf >= 9 {
        dec(f[8], At::Field(n, "stack"))?
    } else {
        0
    };
    if stack as usize >= n_stacks.max(1) {
        return Err(ParseError::new(
            At::Field(n, "stack"),
            format!(
                "stack {stack} is not in stacks.tsv ({} stacks)",
                n_stacks.max(1) - 1
            ),
        ));
    }
    let key = RowKey {
        pid: dec(f[0], At::Field(n, "pid"))?,
        tid: dec(f[1], At::Field(n, "tid"))?,
        cpu: dec(f[2], At::Field(n, "cpu"))?,
        mode: match f[3] {
            "u" => Mode::User,
            "k" => Mode::Kernel,
            other => {
                return Err(ParseError::new(
                    At::Field(n, "mode"),
                    format!("{other:?} is neither u nor k"),
                ))
            }
        },
        image: dec(f[4], At::Field(n, "image"))?,
        offset: hex(f[5], At::Field(n, "offset"))?,
        tags: parse_tags_hex(f[6], words).ok_or_else(|| {
            ParseError::new(
                At::Field(n, "tags"),
                format!("{:?} is not a tag vector of {words} word(s) in hex", f[6]),
            )
        })?,
        stack,
        cgroup,
    };
    if key.image as usize >= n_images {
        return Err(ParseError::new(
            At::Field(n, "image"),
            format!(
                "image {} is not in images.json ({n_images} images)",
                key.image
            ),
        ));
    }
    let count: u64 = dec(f[7], At::Field(n, "count"))?;
    Ok((key, count))
}

/// profile.tsv, the sample file (see [`profile_line`]). `images` are the
/// entries of images.json, `stacks` the stack table; `words` the tag
/// vector's width.
pub fn profile(
    b: &[u8],
    images: Vec<Image>,
    stacks: Vec<Vec<Frame>>,
    words: usize,
) -> Result<Profile, ParseError> {
    let text = utf8(b)?;
    let n_images = images.len();
    let n_stacks = stacks.len().max(1);
    let mut p = Profile::with_images(images);
    p.set_stacks(stacks);
    for (n, line) in data_lines(text) {
        let (key, count) = profile_line(n, line, n_images, n_stacks, words)?;
        p.add_row(key, count)
            .map_err(|e| ParseError::new(At::Field(n, "count"), e.to_string()))?;
    }
    Ok(p)
}

/// Whether a line of a table carries data (not a comment, not blank).
pub fn is_data_line(l: &str) -> bool {
    !l.starts_with('#') && !l.trim().is_empty()
}

/// Escapes a path for a tab-separated line (mappings.tsv): a file name may
/// hold tabs, newlines and backslashes.
pub fn escape_field(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '\t' => o.push_str("\\t"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            c => o.push(c),
        }
    }
    o
}

/// Inverse of [`escape_field`]; None for an unknown or dangling escape.
pub fn unescape_field(s: &str) -> Option<String> {
    let mut o = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            o.push(c);
            continue;
        }
        o.push(match it.next()? {
            '\\' => '\\',
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            _ => return None,
        });
    }
    Some(o)
}

/// cgroups.tsv: `id path` (the id decimal, the path escaped by
/// [`escape_field`], absolute in the cgroup2 mount); an id twice is
/// refused.
pub fn cgroups(b: &[u8]) -> Result<std::collections::HashMap<u64, String>, ParseError> {
    let text = utf8(b)?;
    let mut m = std::collections::HashMap::new();
    for (n, line) in data_lines(text) {
        let Some((id, path)) = line.split_once('\t') else {
            return Err(ParseError::new(
                At::Line(n),
                "1 field, 2 expected (id, path)",
            ));
        };
        let id: u64 = dec(id, At::Field(n, "id"))?;
        let path = unescape_field(path)
            .filter(|p| p.starts_with('/') && !p.contains('\0'))
            .ok_or_else(|| {
                ParseError::new(
                    At::Field(n, "path"),
                    "not absolute, contains NUL, or a bad escape",
                )
            })?;
        if m.insert(id, path).is_some() {
            return Err(ParseError::new(
                At::Field(n, "id"),
                format!("cgroup {id} twice"),
            ));
        }
    }
    Ok(m)
}

/// mappings.tsv: `pid start end pgoff build_id path` (hex; build_id `-`
/// when none; the path escaped by [`escape_field`]).
pub fn mappings(b: &[u8]) -> Result<Vec<(u32, Mapping)>, ParseError> {
    let text = utf8(b)?;
    let mut v = Vec::new();
    for (n, line) in data_lines(text) {
        let f: Vec<&str> = line.splitn(6, '\t').collect();
        if f.len() != 6 {
            return Err(ParseError::new(
                At::Line(n),
                format!("{} tab-separated fields, 6 expected", f.len()),
            ));
        }
        let pid: u32 = dec(f[0], At::Field(n, "pid"))?;
        let start = hex(f[1], At::Field(n, "start"))?;
        let end = hex(f[2], At::Field(n, "end"))?;
        let pgoff = hex(f[3], At::Field(n, "pgoff"))?;
        if end <= start {
            return Err(ParseError::new(
                At::Field(n, "end"),
                format!("{end:x} is not above start {start:x}"),
            ));
        }
        let build_id = match f[4] {
            "-" => None,
            id if is_build_id(id) => Some(id.to_string()),
            id => {
                return Err(ParseError::new(
                    At::Field(n, "build_id"),
                    format!("{id:?} is neither - nor a lower-case hex build ID"),
                ))
            }
        };
        let path = unescape_field(f[5])
            .filter(|p| !p.is_empty() && !p.contains('\0'))
            .ok_or_else(|| {
                ParseError::new(At::Field(n, "path"), "empty, contains NUL, or a bad escape")
            })?;
        v.push((
            pid,
            Mapping {
                start,
                end,
                pgoff,
                path,
                build_id,
            },
        ));
    }
    Ok(v)
}

/// Largest kallsyms text accepted from kallsyms.gz (a gzip bomb must not
/// exhaust memory; a distribution kernel's text symbols are ~10 MiB).
pub const KALLSYMS_MAX: u64 = 256 << 20;

/// kallsyms.gz: the gzip of the text symbols of /proc/kallsyms,
/// `addr type name [module]` per line.
pub fn kallsyms_gz(b: &[u8]) -> Result<Kallsyms, ParseError> {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(b)
        .take(KALLSYMS_MAX + 1)
        .read_to_end(&mut text)
        .map_err(|e| ParseError {
            at: At::File,
            what: "not a valid gzip stream".into(),
            source: Some(Box::new(e)),
        })?;
    if text.len() as u64 > KALLSYMS_MAX {
        return Err(ParseError::new(
            At::File,
            format!("decompresses to more than {KALLSYMS_MAX} bytes"),
        ));
    }
    kallsyms(&text)
}

/// The kallsyms text itself (see [`kallsyms_gz`]).
pub fn kallsyms(b: &[u8]) -> Result<Kallsyms, ParseError> {
    let text = utf8(b)?;
    for (n, line) in data_lines(text) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if !(3..=4).contains(&f.len()) {
            return Err(ParseError::new(
                At::Line(n),
                format!("{} fields, `address type name [module]` expected", f.len()),
            ));
        }
        if f[0].len() > 16 {
            return Err(ParseError::new(
                At::Field(n, "address"),
                "longer than 64 bits",
            ));
        }
        hex(f[0], At::Field(n, "address"))?;
        if f[1].len() != 1 || !f[1].bytes().all(|c| c.is_ascii_alphabetic()) {
            return Err(ParseError::new(
                At::Field(n, "type"),
                format!("{:?} is not a symbol type letter", f[1]),
            ));
        }
        if let Some(m) = f.get(3) {
            if !(m.len() > 2 && m.starts_with('[') && m.ends_with(']')) {
                return Err(ParseError::new(
                    At::Field(n, "module"),
                    format!("{m:?} is not [module]"),
                ));
            }
        }
    }
    Ok(Kallsyms::parse(text))
}

/// A JIT map (jit/perf-PID.map): `START SIZE name` per line, hex with or
/// without 0x, as perf reads them.
pub fn jit_map(b: &[u8]) -> Result<JitMap, ParseError> {
    let text = utf8(b)?;
    let mut v = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        v.push(
            jit_line(line)
                .map_err(|(field, what)| ParseError::new(At::Field(n + 1, field), what))?,
        );
    }
    Ok(JitMap::from_entries(v))
}

/// One line of a JIT map: (start, size, name), or the field that is wrong.
pub fn jit_line(line: &str) -> Result<(u64, u64, String), (&'static str, String)> {
    let mut f = line.splitn(3, ' ');
    let num = |s: Option<&str>, what: &'static str| -> Result<u64, (&'static str, String)> {
        let s = s.unwrap_or("");
        let h = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .unwrap_or(s);
        hex(h, At::File).map_err(|e| (what, e.what))
    };
    let start = num(f.next(), "start")?;
    let size = num(f.next(), "size")?;
    let name = f.next().unwrap_or("").trim();
    if name.is_empty() {
        return Err(("name", "missing".into()));
    }
    if start.checked_add(size).is_none() {
        return Err(("size", format!("{start:x} + {size:x} overflows 64 bits")));
    }
    Ok((start, size, name.to_string()))
}

/// Largest vDSO copy accepted (the vDSO is two to four pages).
pub const VDSO_MAX: u64 = 1 << 20;

/// The ELF64 little-endian raw types of `object` read the headers in
/// place, with every offset and size checked (`ReadRef::read_at`,
/// `read_slice_at`); the checks below are mantle's, on top.
use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _, Sym as _};
use object::read::ReadRef as _;
type Le = object::LittleEndian;
type Ehdr = object::elf::FileHeader64<Le>;
type Phdr = object::elf::ProgramHeader64<Le>;
type Shdr = object::elf::SectionHeader64<Le>;
type Sym = object::elf::Sym64<Le>;
type Nhdr = object::elf::NoteHeader64<Le>;
const LE: Le = object::LittleEndian;
/// sizeof(Elf64_Sym)
const SYM_SIZE: u64 = std::mem::size_of::<Sym>() as u64;
/// sizeof(Elf64_Phdr), sizeof(Elf64_Shdr)
const PHDR_SIZE: u64 = std::mem::size_of::<Phdr>() as u64;
const SHDR_SIZE: u64 = std::mem::size_of::<Shdr>() as u64;

/// Walks the notes of note section `i` (header `sh`): each is a 12-byte
/// header (namesz, descsz, type), then name and descriptor, each padded to
/// 4 bytes.
///
/// Hand-walked over `object`'s note header rather than with its
/// `NoteIterator`: that iterator refuses a note cut short by the end of the
/// section, where a symbolizer (blazesym 0.2) stops quietly, so the image
/// must be accepted; and what must be refused here, a size that overflows
/// when padded, needs its own offset in the error.
fn notes(b: &[u8], sh: &Shdr, i: u64) -> Result<(), ParseError> {
    let (off, size) = (sh.sh_offset(LE), sh.sh_size(LE));
    // inside the file: checked before
    let mut at = off;
    let end = off + size;
    while end - at >= 12 {
        let Ok(n) = b.read_at::<Nhdr>(at) else {
            break; // cannot be: 12 bytes inside the file
        };
        let (namesz, descsz) = (n.n_namesz.get(LE), n.n_descsz.get(LE));
        for (field, o, v) in [("namesz", 0, namesz), ("descsz", 4, descsz)] {
            if v > u32::MAX - 3 {
                return Err(ParseError::new(
                    At::Offset(at + o),
                    format!("section {i}: note {field} {v:#x} cannot be padded to 4 bytes"),
                ));
            }
        }
        let pad = |v: u32| (v as u64 + 3) & !3;
        let next = at + 12 + pad(namesz) + pad(descsz);
        if next > end {
            // a symbolizer stops here too (the note is cut)
            break;
        }
        at = next;
    }
    Ok(())
}

/// The name of section `sh` in the section name table `strtab` (None when
/// the table has no data, or the name is outside it or unterminated).
fn section_name<'b>(b: &'b [u8], strtab: &Shdr, sh: &Shdr) -> Option<&'b [u8]> {
    if strtab.sh_type(LE) == object::elf::SHT_NOBITS {
        return None;
    }
    // inside the file: checked for every section before this is called
    let (off, size) = (strtab.sh_offset(LE), strtab.sh_size(LE));
    object::read::StringTable::new(b, off, off + size)
        .get(sh.sh_name(LE))
        .ok()
}

/// vdso.so: checks that the bytes are a 64-bit little-endian ELF image
/// whose program and section header tables, and every section's data,
/// lie inside the file, that no symbol of the tables a symbolizer reads
/// (`.symtab`, `.dynsym`, by name or by type) ends past 2^64, that the
/// notes of every note section have sizes that can be aligned, and that no
/// section is compressed (a symbolizer would parse the decompressed data,
/// which is not checked here; the kernel's vDSO has none), before a
/// symbolizer is let near it. (blazesym 0.2 adds st_value and st_size, and
/// aligns note sizes, unchecked: found by fuzzing, it panics in debug
/// builds.)
///
/// The headers are read with `object`'s raw ELF types. Its table getters
/// (`FileHeader::program_headers`, `section_headers`, `shstrndx`) are not
/// used: they read e_phoff or e_shoff 0 as "no table", e_phnum 0xffff and
/// e_shnum 0 as extended counts kept in section 0, and refuse e_shstrndx 0,
/// while these checks, fuzzed against what blazesym reads, take the fields
/// literally; and every error names the field's offset.
pub fn elf_image(b: &[u8]) -> Result<(), ParseError> {
    use object::elf::{ELFCLASS64, ELFDATA2LSB, ELFMAG, EV_CURRENT};
    use object::elf::{SHF_COMPRESSED, SHT_DYNSYM, SHT_NOBITS, SHT_NOTE, SHT_SYMTAB};
    let bad = |o: u64, what: String| Err(ParseError::new(At::Offset(o), what));
    let h = match b.read_at::<Ehdr>(0) {
        Ok(h) if h.e_ident.magic == ELFMAG => h,
        _ => return bad(0, "not an ELF file (no ELF header)".into()),
    };
    if h.e_ident.class != ELFCLASS64 || h.e_ident.data != ELFDATA2LSB {
        return bad(4, "not a 64-bit little-endian ELF file".into());
    }
    if h.e_ident.version != EV_CURRENT {
        return bad(6, format!("ELF version {} (1 expected)", h.e_ident.version));
    }
    let len = b.len() as u64;
    let phoff = h.e_phoff(LE);
    let shoff = h.e_shoff(LE);
    let ehsize = h.e_ehsize(LE);
    let phentsize = u64::from(h.e_phentsize(LE));
    let phnum = u64::from(h.e_phnum(LE));
    let shentsize = u64::from(h.e_shentsize(LE));
    let shnum = u64::from(h.e_shnum(LE));
    let shstrndx = u64::from(h.e_shstrndx(LE));
    if ehsize < 64 {
        return bad(52, format!("ELF header size {ehsize} (64 expected)"));
    }
    if phnum > 0 {
        if phentsize != PHDR_SIZE {
            return bad(54, format!("program header size {phentsize} (56 expected)"));
        }
        let Ok(phdrs) = b.read_slice_at::<Phdr>(phoff, phnum as usize) else {
            return bad(
                32,
                format!("program headers ({phnum} at {phoff:#x}) end past the file ({len} bytes)"),
            );
        };
        // a symbolizer maps file offsets to addresses and back through
        // the segments (blazesym 0.2 adds p_offset + p_filesz and
        // p_vaddr + p_filesz unchecked: found by fuzzing)
        for (i, ph) in (0u64..).zip(phdrs) {
            let p = phoff + PHDR_SIZE * i;
            let (off, vaddr, filesz) = (ph.p_offset(LE), ph.p_vaddr(LE), ph.p_filesz(LE));
            if off.checked_add(filesz).is_none_or(|e| e > len) {
                return bad(
                    p + 8,
                    format!(
                        "segment {i}: {filesz} bytes at {off:#x} end past the file ({len} bytes)"
                    ),
                );
            }
            if vaddr.checked_add(filesz).is_none() {
                return bad(
                    p + 16,
                    format!("segment {i}: {filesz} bytes at address {vaddr:#x} end past 2^64"),
                );
            }
        }
    }
    if shnum == 0 {
        return Ok(());
    }
    if shentsize != SHDR_SIZE {
        return bad(58, format!("section header size {shentsize} (64 expected)"));
    }
    let Ok(shdrs) = b.read_slice_at::<Shdr>(shoff, shnum as usize) else {
        return bad(
            40,
            format!("section headers ({shnum} at {shoff:#x}) end past the file ({len} bytes)"),
        );
    };
    let Some(strtab) = shdrs.get(shstrndx as usize) else {
        return bad(
            62,
            format!("section name table index {shstrndx} is not a section (of {shnum})"),
        );
    };
    // the file offset of section header i
    let at = |i: u64| shoff + SHDR_SIZE * i;
    for (i, sh) in (0u64..).zip(shdrs) {
        let sh_type = sh.sh_type(LE);
        let off = sh.sh_offset(LE);
        let size = sh.sh_size(LE);
        let link = u64::from(sh.sh_link(LE));
        let end = off.checked_add(size);
        if end.is_none() || (sh_type != SHT_NOBITS && end.is_some_and(|e| e > len)) {
            return bad(
                at(i),
                format!(
                    "section {i}: data ({size} bytes at {off:#x}) ends past the file ({len} bytes)"
                ),
            );
        }
        if link >= shnum {
            return bad(
                at(i) + 40,
                format!("section {i}: link {link} is not a section (of {shnum})"),
            );
        }
    }
    for (i, sh) in (0u64..).zip(shdrs) {
        let sh_type = sh.sh_type(LE);
        if sh.sh_flags(LE) & u64::from(SHF_COMPRESSED) != 0 {
            return bad(at(i) + 8, format!("section {i} is compressed"));
        }
        if sh_type == SHT_NOTE {
            notes(b, sh, i)?;
            continue;
        }
        let name = section_name(b, strtab, sh);
        let symbols = matches!(sh_type, SHT_SYMTAB | SHT_DYNSYM)
            || matches!(name, Some(b".symtab") | Some(b".dynsym"));
        if !symbols || sh_type == SHT_NOBITS {
            continue;
        }
        let (off, size) = (sh.sh_offset(LE), sh.sh_size(LE));
        if size % SYM_SIZE != 0 {
            return bad(
                at(i) + 32,
                format!(
                    "section {i}: a symbol table of {size} bytes (not a multiple of {SYM_SIZE})"
                ),
            );
        }
        // inside the file: checked above
        let syms = b
            .read_slice_at::<Sym>(off, (size / SYM_SIZE) as usize)
            .unwrap_or_default();
        for (s, sym) in (0u64..).zip(syms) {
            let (value, sz) = (sym.st_value(LE), sym.st_size(LE));
            if value.checked_add(sz).is_none() {
                return bad(
                    off + s * SYM_SIZE + 8,
                    format!("section {i}: symbol {s} ({sz:#x} bytes at {value:#x}) ends past 2^64"),
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_strict() {
        assert!(dec::<u32>("+1", At::File).is_err());
        assert!(dec::<u32>("4294967296", At::File).is_err());
        assert_eq!(dec::<u32>("4294967295", At::File).unwrap(), u32::MAX);
        assert!(hex("+f", At::File).is_err());
        assert!(hex("10000000000000000", At::File).is_err());
        assert_eq!(hex("ffffffffffffffff", At::File).unwrap(), u64::MAX);
    }

    #[test]
    fn escapes_roundtrip() {
        for s in ["/a b", "/a\tb\nc\\d\re", "\\n"] {
            assert_eq!(unescape_field(&escape_field(s)).as_deref(), Some(s));
        }
        assert_eq!(unescape_field("a\\"), None);
        assert_eq!(unescape_field("a\\x"), None);
    }

    #[test]
    fn profile_errors_name_line_and_field() {
        let im = || vec![Image::named("[kernel.kallsyms]", ImageKind::Kernel)];
        let e = profile(b"# h\n1\t1\t0\tx\t0\t10\t0\t5\n", im(), vec![], 1).unwrap_err();
        assert_eq!(e.at, At::Field(2, "mode"));
        let e = profile(b"1\t1\t0\tu\t1\t10\t0\t5\n", im(), vec![], 1).unwrap_err();
        assert_eq!(e.at, At::Field(1, "image"));
        // non-ASCII in the tags field was sliced inside a character
        let e = profile("1\t1\t0\tu\t0\t10\t\u{e9}\t5\n".as_bytes(), im(), vec![], 1).unwrap_err();
        assert_eq!(e.at, At::Field(1, "tags"));
        let e = profile(b"1\t1\t0\tu\t0\t10\t0\t5\n\xff", im(), vec![], 1).unwrap_err();
        assert_eq!(e.at, At::Line(2));
    }

    #[test]
    fn jit_lines() {
        assert_eq!(jit_line("0x10 0x2 f g"), Ok((0x10, 2, "f g".into())));
        assert_eq!(jit_line("10 2").unwrap_err().0, "name");
        assert_eq!(jit_line("zz 2 f").unwrap_err().0, "start");
        assert_eq!(jit_line("ffffffffffffffff 2 f").unwrap_err().0, "size");
    }

    #[test]
    fn elf_checks() {
        let own = std::fs::read("/proc/self/exe").unwrap();
        elf_image(&own).unwrap();
        assert!(elf_image(b"\x7fELF").is_err());
        let mut t = own.clone();
        t.truncate(4096);
        let e = elf_image(&t).unwrap_err();
        assert!(e.what.contains("past the file"), "{e}");
        let mut s = own;
        s[62] = 0xff;
        s[63] = 0xff; // shstrndx
        assert!(elf_image(&s).is_err());
    }
}
