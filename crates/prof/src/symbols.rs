//! Symbols for the report: ELF symbol tables and DWARF through blazesym
//! (file offsets in; names, source lines and inlined calls out; the
//! public name among aliases from [`crate::elfsyms`]; unnamed code of a
//! stripped image grouped per function, `unnamed_group`), the kernel through the session's kallsyms
//! snapshot, the vDSO through the session's copy of it, JIT code through the
//! /tmp/perf-PID.map files captured while recording. A file whose build ID
//! differs from the one recorded is reported and not symbolized (its
//! symbols would be someone else's).

use crate::debugfile::Segments;
use crate::elfsyms::ElfSyms;
use crate::files::{self, OpenError};
use crate::model::{Image, ImageKind, Kallsyms, SymInfo, Symbolizer};
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Lower-case hex build ID of an ELF file, if it has one. Only a regular
/// file is opened (a FIFO at `path` would block a plain open forever).
pub fn build_id(path: &Path) -> Option<String> {
    let f = files::open_regular(path).ok()?;
    build_id_of(&f)
}

/// Build ID of an open file.
fn build_id_of(f: &File) -> Option<String> {
    let id = guarded(|| blazesym::helper::read_elf_build_id(&files::fd_path(f)))
        .ok()?
        .ok()??;
    Some(hex(&id))
}

/// Runs a call into blazesym. It parses files that a session names and
/// that anyone may have crafted; the session's own vDSO copy is checked
/// first ([`crate::parse::elf_image`]), but files on disk are not, and a
/// panic in a third-party parser (blazesym 0.2 has unchecked additions,
/// found by fuzzing) must cost the symbols of one image, not the report.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, SymbolizerPanic> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| SymbolizerPanic)
}

/// blazesym panicked on a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolizerPanic;

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A JIT map: sorted (start, size, name); start + size fits a u64
/// (checked by [`crate::parse::jit_line`]).
#[derive(Debug, Default, Clone)]
pub struct JitMap(Vec<(u64, u64, String)>);

impl JitMap {
    /// From entries already checked by [`crate::parse::jit_line`].
    pub fn from_entries(mut v: Vec<(u64, u64, String)>) -> JitMap {
        v.sort();
        JitMap(v)
    }

    /// Keeps the well-formed lines of a JIT's perf map (written by the JIT,
    /// so anything); returns them and the number of lines dropped. The
    /// recorder stores only these, so that the session's copy parses.
    pub fn clean(text: &str) -> (String, usize) {
        let mut out = String::new();
        let mut dropped = 0;
        for l in text.lines().filter(|l| !l.trim().is_empty()) {
            match crate::parse::jit_line(l) {
                Ok((a, n, name)) if !name.contains(['\n', '\r']) => {
                    out += &format!("{a:x} {n:x} {name}\n");
                }
                _ => dropped += 1,
            }
        }
        (out, dropped)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.0.partition_point(|(a, _, _)| *a <= addr);
        let (a, n, name) = self.0.get(i.checked_sub(1)?)?;
        // addr >= a (partition_point), so no overflow whatever the entry;
        // a zero-sized entry still covers its first byte
        (addr - a < (*n).max(1)).then_some(name.as_str())
    }
}

/// The debug files an ELF image names: `.gnu_debuglink` (a file name),
/// and whether it has `.gnu_debugaltlink` or `.debug_sup`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Links {
    debuglink: Option<Vec<u8>>,
    /// The CRC-32 the debug link gives for its file.
    crc: Option<u32>,
    altlink: bool,
    sup: bool,
}

fn read_at(f: &File, off: u64, len: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut v = vec![0; len];
    f.read_exact_at(&mut v, off).ok()?;
    Some(v)
}

/// Reads the section headers and names of an ELF file (pread, not the
/// whole file) for its debug links; None when they cannot be read.
fn links(f: &File) -> Option<Links> {
    let le16 = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let le32 = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as u64;
    let le64 = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let eh = read_at(f, 0, 64)?;
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let (shoff, shnum, shstrndx) = (le64(&eh, 40), le16(&eh, 60), le16(&eh, 62));
    if shnum == 0 {
        return Some(Links::default());
    }
    if le16(&eh, 58) != 64 || shstrndx >= shnum {
        return None;
    }
    // at most 65535 * 64 bytes
    let sh = read_at(f, shoff, (shnum * 64) as usize)?;
    let strh = (shstrndx * 64) as usize;
    let (stroff, strsize) = (le64(&sh, strh + 24), le64(&sh, strh + 32));
    if strsize > 16 << 20 {
        return None;
    }
    let names = read_at(f, stroff, strsize as usize)?;
    let mut l = Links::default();
    for i in 0..shnum as usize {
        let h = &sh[i * 64..i * 64 + 64];
        let name = names.get(le32(h, 0) as usize..).and_then(|r| {
            let end = r.iter().position(|&c| c == 0)?;
            Some(&r[..end])
        });
        match name {
            Some(b".gnu_debuglink") => {
                let data = read_at(f, le64(h, 24), le64(h, 32).min(4096) as usize)?;
                let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
                l.debuglink = Some(data[..end].to_vec());
                // the CRC follows the name's NUL, 4-byte aligned
                let at = (end + 4) & !3;
                l.crc = data
                    .get(at..at + 4)
                    .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
            }
            Some(b".gnu_debugaltlink") => l.altlink = true,
            Some(b".debug_sup") => l.sup = true,
            _ => {}
        }
    }
    Some(l)
}

/// Whether blazesym may read DWARF for this image: with DWARF on it opens
/// the debug files the image names, with a plain (blocking) open, so a
/// FIFO there would hang the report. It looks for a `.gnu_debuglink` name
/// in /usr/lib/debug and /lib/debug (root's) and beside the image; for
/// `.gnu_debugaltlink` and `.debug_sup` it takes the path in the file.
/// Allowed: no links, or a debug link that is a plain file name whose
/// candidate beside the image is absent, or a regular file that links to
/// nothing further.
fn debug_links_safe(f: &File) -> Result<(), String> {
    let l = links(f).ok_or("its section headers cannot be read")?;
    if l.altlink || l.sup {
        return Err("it names supplementary debug files (.gnu_debugaltlink or .debug_sup), which are not followed".into());
    }
    let Some(name) = l.debuglink else {
        return Ok(());
    };
    let shown = String::from_utf8_lossy(&name).into_owned();
    if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
        return Err(format!(
            "its .gnu_debuglink {shown:?} is not a plain file name, not followed"
        ));
    }
    let real = std::fs::canonicalize(files::fd_path(f))
        .map_err(|e| format!("its real path is unknown ({e})"))?;
    let beside = real.with_file_name(std::ffi::OsStr::from_bytes(&name));
    match files::open_regular(&beside) {
        Err(e) if e.is_not_found() => Ok(()),
        Ok(d) => match links(&d) {
            Some(l) if l == Links::default() => Ok(()),
            _ => Err(format!(
                "its debug file {} names further debug files, not followed",
                beside.display()
            )),
        },
        Err(e) => Err(format!("its debug file {}: {e}", beside.display())),
    }
}

/// The report's symbolizer over a session: files named by the session are
/// opened only if they are regular files, and stay open (blazesym reads
/// them through /proc/self/fd), so what is symbolized is what was checked.
pub struct SessionSymbolizer {
    sym: blazesym::symbolize::Symbolizer,
    kallsyms: Kallsyms,
    /// The session's vDSO copy (validated at load) in a memfd.
    vdso: Option<File>,
    jit: HashMap<u32, crate::symbols::JitMap>,
    /// Per image: the open file and whether DWARF may be read (see
    /// [`debug_links_safe`]), or None when it is not usable.
    checked: HashMap<Image, Option<(File, bool)>>,
    /// Where separate debug files are looked for ([`crate::debugfile`]).
    debug_dirs: Vec<PathBuf>,
    /// Per ELF image: its separate debug file, or None when it has none.
    debug: HashMap<Image, Option<DebugFile>>,
    /// Per ELF image: its segments and function symbols (with its debug
    /// file's, once read).
    segs: HashMap<Image, (Segments, ElfSyms)>,
    /// Images that could not be symbolized, and why.
    pub warnings: Vec<String>,
    /// (image, debug file) of every image that got symbols from one.
    pub debug_files: Vec<(String, PathBuf)>,
}

impl SessionSymbolizer {
    pub fn new(kallsyms: Kallsyms) -> Self {
        SessionSymbolizer {
            sym: new_symbolizer(),
            kallsyms,
            vdso: None,
            jit: HashMap::new(),
            checked: HashMap::new(),
            debug_dirs: crate::debugfile::DEFAULT_DEBUG_DIRS
                .iter()
                .map(PathBuf::from)
                .collect(),
            debug: HashMap::new(),
            segs: HashMap::new(),
            warnings: Vec::new(),
            debug_files: Vec::new(),
        }
    }

    /// Looks for separate debug files in these directories (each one's
    /// `.build-id/`) instead of the default ones.
    pub fn with_debug_dirs(mut self, dirs: Vec<PathBuf>) -> Self {
        self.debug_dirs = dirs;
        self
    }

    /// The image's separate debug file (found once, [`Self::find_debug_file`]).
    fn debug_file(&mut self, image: &Image) -> Option<&DebugFile> {
        if !self.debug.contains_key(image) {
            let found = self.find_debug_file(image);
            if let Some(d) = &found {
                self.debug_files.push((image.path.clone(), d.path.clone()));
            }
            self.debug.insert(image.clone(), found);
        }
        self.debug.get(image).and_then(Option::as_ref)
    }

    /// The debug file of a checked ELF image: by its build ID in the
    /// debug directories ([`crate::debugfile::find`]), else by its
    /// `.gnu_debuglink` name ([`crate::debugfile::find_by_link`]: beside
    /// the image, in `.debug/` beside it, under each debug directory at
    /// the image's own directory), checked by build ID (or the link's
    /// CRC when the image has no build ID).
    fn find_debug_file(&self, image: &Image) -> Option<DebugFile> {
        let (f, _) = self.checked.get(image)?.as_ref()?;
        let id = image.build_id.clone().or_else(|| build_id_of(f));
        let by_id = id
            .as_deref()
            .and_then(|id| crate::debugfile::find(id, &self.debug_dirs))
            .filter(|(d, _)| build_id_of(d) == id);
        let (d, path) = match by_id {
            Some(x) => x,
            None => {
                let l = links(f)?;
                let name = l.debuglink?;
                let real = std::fs::canonicalize(&image.path).ok()?;
                // the CRC is read (the whole file) only when no build ID
                // tells the file
                let (d, p) = crate::debugfile::find_by_link(
                    &real,
                    std::ffi::OsStr::from_bytes(&name),
                    &self.debug_dirs,
                    l.crc.filter(|_| id.is_none()),
                )?;
                // the debug file of this image, not of another build
                if id.is_some() && build_id_of(&d) != id {
                    return None;
                }
                (d, p)
            }
        };
        // its DWARF is read only if it names no further debug file
        let dwarf = links(&d).is_some_and(|l| l.debuglink.is_none() && !l.altlink && !l.sup);
        let syms = ElfSyms::read(&d);
        Some(DebugFile {
            file: d,
            path,
            dwarf,
            syms,
        })
    }

    /// Symbolizes \[vdso\] samples from this image (checked by
    /// [`crate::parse::elf_image`]).
    pub fn with_vdso(mut self, image: &[u8]) -> Self {
        match crate::kernel::memfd("mantle-prof-vdso", image) {
            Ok(f) => self.vdso = Some(f),
            Err(e) => self.warnings.push(format!(
                "[vdso]: cannot hold the session's copy in memory: {e}: not symbolized"
            )),
        }
        self
    }

    /// JIT maps by pid.
    pub fn with_jit(mut self, jit: HashMap<u32, JitMap>) -> Self {
        self.jit = jit;
        self
    }

    /// The file of an ELF image, if it is still the one that was profiled.
    fn usable(&mut self, image: &Image) -> Option<&(File, bool)> {
        if !self.checked.contains_key(image) {
            let f = self.check(image);
            self.checked.insert(image.clone(), f);
        }
        self.checked.get(image).and_then(Option::as_ref)
    }

    fn check(&mut self, image: &Image) -> Option<(File, bool)> {
        let f = match files::open_regular(Path::new(&image.path)) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => {
                self.warnings.push(format!(
                    "{}: file gone since recording: not symbolized",
                    image.path
                ));
                return None;
            }
            Err(OpenError::NotRegular(kind)) => {
                self.warnings.push(format!(
                    "{}: not a regular file ({kind}) now: not symbolized",
                    image.path
                ));
                return None;
            }
            Err(e) => {
                self.warnings
                    .push(format!("{}: cannot open: {e}: not symbolized", image.path));
                return None;
            }
        };
        match (&image.build_id, build_id_of(&f)) {
            (Some(rec), Some(now)) if *rec != now => {
                self.warnings.push(format!(
                    "{}: replaced on disk since recording (build ID {rec} then, {now} now): not symbolized",
                    image.path
                ));
                None
            }
            (Some(rec), None) => {
                self.warnings.push(format!(
                    "{}: replaced on disk since recording (build ID {rec} then, none now): not symbolized",
                    image.path
                ));
                None
            }
            _ => {
                let dwarf = match debug_links_safe(&f) {
                    Ok(()) => true,
                    Err(why) => {
                        self.warnings.push(format!(
                            "{}: {why}: symbols from its ELF symbol tables only",
                            image.path
                        ));
                        false
                    }
                };
                Some((f, dwarf))
            }
        }
    }

    /// `debug_syms`: also DWARF, and the debug files the image links to.
    fn elf(
        sym: &blazesym::symbolize::Symbolizer,
        f: &File,
        offsets: &[u64],
        debug_syms: bool,
    ) -> Result<Vec<Option<String>>, SymbolizerPanic> {
        Ok(
            Self::elf_full(sym, f, Input::FileOffset(offsets), debug_syms)?
                .into_iter()
                .map(|s| s.map(|s| demangle(s.name)))
                .collect(),
        )
    }

    /// blazesym's whole answer (names not demangled), one per address.
    fn elf_full(
        sym: &blazesym::symbolize::Symbolizer,
        f: &File,
        input: Input<&[u64]>,
        debug_syms: bool,
    ) -> Result<Vec<Option<Found>>, SymbolizerPanic> {
        let n = match input {
            Input::FileOffset(v) | Input::VirtOffset(v) | Input::AbsAddr(v) => v.len(),
        };
        let mut elf = Elf::new(files::fd_path(f));
        elf.debug_syms = debug_syms;
        let src = Source::Elf(elf);
        Ok(match guarded(|| sym.symbolize(&src, input))? {
            Ok(v) => v
                .into_iter()
                .map(|s| match s {
                    Symbolized::Sym(s) => Some(Found::of(s)),
                    Symbolized::Unknown(_) => None,
                })
                .collect(),
            Err(_) => vec![None; n],
        })
    }

    /// Names and source lines of offsets in an ELF image: blazesym on the
    /// image (symbol tables, and DWARF when its links are safe), then on
    /// its separate debug file for what is still unknown; the public name
    /// among aliases ([`crate::elfsyms`]); unnamed code grouped per
    /// function ([`unnamed_group`]).
    fn locate_elf(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<SymInfo>> {
        let _ = self.usable(image);
        let Some((f, dwarf)) = self.checked.get(image).and_then(Option::as_ref) else {
            return vec![None; offsets.len()];
        };
        let r = Self::elf_full(&self.sym, f, Input::FileOffset(offsets), *dwarf);
        if !self.segs.contains_key(image) {
            let segs = Segments::read(f);
            let syms = ElfSyms::read(f);
            self.segs.insert(image.clone(), (segs, syms));
        }
        let mut found = or_warn(&mut self.warnings, r, image, offsets.len());
        // what the image left without a name or a line, from its debug file
        let want: Vec<usize> = (0..offsets.len())
            .filter(|&i| found[i].as_ref().is_none_or(|s| s.file.is_none()))
            .collect();
        let mut debug_syms = None;
        // looked up whatever blazesym found: its symbol table names
        // aliases the image's tables lack (glibc's local __GI_ names)
        if self.debug_file(image).is_some() {
            let (segs, _) = &self.segs[image];
            let (idx, addrs): (Vec<usize>, Vec<u64>) = want
                .iter()
                .filter_map(|&i| segs.vaddr(offsets[i]).map(|a| (i, a)))
                .unzip();
            let d = self.debug[image].as_ref().expect("found above");
            match guarded(|| {
                Self::elf_full(&self.sym, &d.file, Input::VirtOffset(&addrs), d.dwarf)
            }) {
                _ if addrs.is_empty() => {}
                Ok(Ok(v)) => {
                    for (i, s) in idx.into_iter().zip(v) {
                        match (&mut found[i], s) {
                            (Some(have), Some(s)) if have.addr == s.addr => {
                                have.file = s.file;
                                have.line = s.line;
                                have.inlined = s.inlined;
                            }
                            (slot @ None, Some(s)) => *slot = Some(s),
                            _ => {}
                        }
                    }
                }
                _ => self.warnings.push(format!(
                    "{}: the symbolizer (blazesym) failed on its debug file: not symbolized from it",
                    image.display()
                )),
            }
            debug_syms = Some(d.syms.clone());
        }
        let (segs, syms) = self.segs.get_mut(image).expect("inserted above");
        if let Some(ds) = debug_syms.filter(|d| !d.is_empty()) {
            // once: a debug file's symbols join the image's
            syms.merge(ds);
            self.debug
                .get_mut(image)
                .and_then(Option::as_mut)
                .expect("found above")
                .syms = ElfSyms::default();
        }
        let (segs, syms) = (&*segs, &*syms);
        let (f, dwarf) = self.checked[image].as_ref().expect("usable above");
        // the first line of each function: its start address, looked up
        // where its lines came from
        let mut starts: Vec<u64> = found
            .iter()
            .flatten()
            .filter(|s| s.file.is_some())
            .map(|s| s.addr)
            .collect();
        starts.sort_unstable();
        starts.dedup();
        let mut start_line: HashMap<u64, u32> = HashMap::new();
        if !starts.is_empty() {
            let d = self.debug.get(image).and_then(Option::as_ref);
            for (file, dw) in [(f, *dwarf)]
                .into_iter()
                .chain(d.map(|d| (&d.file, d.dwarf)))
            {
                if let Ok(v) = Self::elf_full(&self.sym, file, Input::VirtOffset(&starts), dw) {
                    for (a, s) in starts.iter().zip(v) {
                        if let Some(line) = s.and_then(|s| s.file.is_some().then_some(s.line)) {
                            start_line.entry(*a).or_insert(line);
                        }
                    }
                }
            }
        }
        offsets
            .iter()
            .zip(found)
            .map(|(&off, s)| {
                let vaddr = segs.vaddr(off);
                match s {
                    Some(s) => {
                        let public = syms.best_at(s.addr).map(|p| p.name.clone());
                        let raw = public.unwrap_or(s.name);
                        let size = s.size.or_else(|| {
                            syms.at(s.addr)
                                .iter()
                                .map(|x| x.size)
                                .max()
                                .filter(|&n| n > 0)
                        });
                        let range = segs
                            .offset(s.addr)
                            .and_then(|o| Some((o, o.checked_add(size?)?)));
                        Some(SymInfo {
                            aliases: syms
                                .aliases(s.addr, &raw)
                                .into_iter()
                                .map(demangle)
                                .collect(),
                            name: demangle(raw),
                            file: s.file,
                            line: s.line,
                            start_line: start_line.get(&s.addr).copied().unwrap_or(0),
                            range,
                            inlined: s
                                .inlined
                                .into_iter()
                                .map(|(n, f, l)| (demangle(n), f, l))
                                .collect(),
                        })
                    }
                    None => {
                        let v = vaddr?;
                        if let Some(c) = syms.covering(v) {
                            let range = segs
                                .offset(c.addr)
                                .map(|o| (o, o.saturating_add(c.size.max(1))));
                            return Some(SymInfo {
                                aliases: syms
                                    .aliases(c.addr, &c.name)
                                    .into_iter()
                                    .map(demangle)
                                    .collect(),
                                name: demangle(c.name.clone()),
                                range,
                                ..Default::default()
                            });
                        }
                        unnamed_group(image, syms, segs, off)
                    }
                }
            })
            .collect()
    }
}

/// The outcome of a call into blazesym, with a warning naming the image
/// when it failed.
fn or_warn<T: Clone>(
    warnings: &mut Vec<String>,
    r: Result<Vec<Option<T>>, SymbolizerPanic>,
    image: &Image,
    n: usize,
) -> Vec<Option<T>> {
    r.unwrap_or_else(|SymbolizerPanic| {
        warnings.push(format!(
            "{}: the symbolizer (blazesym) failed on this file: not symbolized",
            image.display()
        ));
        vec![None; n]
    })
}

/// The build ID of an ELF image given as bytes, and the symbols at file
/// offsets in it: what the report asks blazesym about an image (the vDSO
/// copy goes this way; tests and the fuzz targets use it too). Outer
/// error: no memfd; inner: blazesym panicked.
#[allow(clippy::type_complexity)]
pub fn elf_bytes_info(
    image: &[u8],
    offsets: &[u64],
) -> std::io::Result<Result<(Option<String>, Vec<Option<String>>), SymbolizerPanic>> {
    let f = crate::kernel::memfd("mantle-prof-elf", image)?;
    let sym = new_symbolizer();
    Ok(SessionSymbolizer::elf(&sym, &f, offsets, false).map(|names| (build_id_of(&f), names)))
}

impl Symbolizer for SessionSymbolizer {
    fn symbolize(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<String>> {
        match image.kind {
            ImageKind::Kernel => offsets
                .iter()
                .map(|o| self.kallsyms.lookup(*o).map(str::to_string))
                .collect(),
            ImageKind::Elf => self
                .locate_elf(image, offsets)
                .into_iter()
                .map(|s| s.map(|s| s.name))
                .collect(),
            // its .dynsym names every vDSO function: no DWARF, and no file
            // the session's copy names is followed
            ImageKind::Vdso => match &self.vdso {
                Some(f) => {
                    let r = Self::elf(&self.sym, f, offsets, false);
                    or_warn(&mut self.warnings, r, image, offsets.len())
                }
                None => vec![None; offsets.len()],
            },
            ImageKind::Jit => {
                let m = image.pid.and_then(|p| self.jit.get(&p));
                offsets
                    .iter()
                    .map(|o| m.and_then(|m| m.lookup(*o)).map(str::to_string))
                    .collect()
            }
            ImageKind::Anon | ImageKind::Unknown => vec![None; offsets.len()],
        }
    }

    fn locate(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<SymInfo>> {
        match image.kind {
            ImageKind::Elf => self.locate_elf(image, offsets),
            _ => self
                .symbolize(image, offsets)
                .into_iter()
                .map(|n| n.map(SymInfo::named))
                .collect(),
        }
    }
}

impl SessionSymbolizer {
    /// The code of an ELF or vDSO image at file offsets \[start, end) (at
    /// most [`CODE_MAX`] bytes), and the virtual address of `start`: for
    /// disassembly. The file is the one checked at symbolization (same
    /// build ID).
    pub fn code(&mut self, image: &Image, start: u64, end: u64) -> Result<(u64, Vec<u8>), String> {
        use std::os::unix::fs::FileExt;
        let len = end
            .checked_sub(start)
            .filter(|&n| n > 0 && n <= CODE_MAX)
            .ok_or_else(|| {
                format!(
                    "a function of {} bytes is not disassembled",
                    end.wrapping_sub(start)
                )
            })?;
        let f = match image.kind {
            ImageKind::Elf => {
                let _ = self.usable(image);
                &self
                    .checked
                    .get(image)
                    .and_then(Option::as_ref)
                    .ok_or("the file is not the one recorded (see the report's warnings)")?
                    .0
            }
            ImageKind::Vdso => self.vdso.as_ref().ok_or("no vDSO copy in the session")?,
            _ => return Err(format!("no code of {} is kept", image.display())),
        };
        let vaddr = Segments::read(f)
            .vaddr(start)
            .ok_or("the offset is in no loaded segment")?;
        let mut b = vec![0u8; len as usize];
        f.read_exact_at(&mut b, start).map_err(|e| e.to_string())?;
        Ok((vaddr, b))
    }
}

/// The largest function [`SessionSymbolizer::code`] reads.
pub const CODE_MAX: u64 = 1 << 20;

/// What blazesym found at one address, owned (names not demangled).
#[derive(Debug, Clone)]
struct Found {
    name: String,
    /// The function's start (virtual address) and size.
    addr: u64,
    size: Option<u64>,
    file: Option<String>,
    line: u32,
    inlined: Vec<(String, Option<String>, u32)>,
}

impl Found {
    fn of(s: blazesym::symbolize::Sym<'_>) -> Found {
        let path = |c: &blazesym::symbolize::CodeInfo<'_>| c.to_path().display().to_string();
        let (file, line) = match s.code_info.as_deref() {
            Some(c) => (Some(path(c)), c.line.unwrap_or(0)),
            None => (None, 0),
        };
        Found {
            name: s.name.into_owned(),
            addr: s.addr,
            size: s.size.map(|n| n as u64),
            file,
            line,
            inlined: s
                .inlined
                .iter()
                .map(|i| {
                    let c = i.code_info.as_ref();
                    (
                        i.name.to_string(),
                        c.map(path),
                        c.and_then(|c| c.line).unwrap_or(0),
                    )
                })
                .collect(),
        }
    }
}

/// A separate debug file of an image.
struct DebugFile {
    file: File,
    path: PathBuf,
    /// Whether its DWARF may be read (it names no further debug file).
    dwarf: bool,
    /// Its symbol table, until merged into the image's.
    syms: ElfSyms,
}

/// The name of unnamed code at file offset `off` of a stripped image: one
/// row per unnamed function, not per address. The function is the
/// `.eh_frame_hdr` entry holding the address, else the gap between the
/// symbols around it; named `[IMAGE+0xSTART..0xEND]` (file offsets,
/// end excluded), with ` after SYMBOL` when a symbol precedes it.
fn unnamed_group(image: &Image, syms: &ElfSyms, segs: &Segments, off: u64) -> Option<SymInfo> {
    let v = segs.vaddr(off)?;
    let (seg_lo, seg_hi) = segs.segment_of(v)?;
    let prev = syms.preceding(v);
    let (lo, hi) = syms.fde_range(v).unwrap_or_else(|| {
        let lo = prev
            .map(|p| p.addr.saturating_add(p.size))
            .filter(|&e| e <= v)
            .unwrap_or(seg_lo);
        let hi = syms.next_start(v).unwrap_or(seg_hi).min(seg_hi);
        (lo, hi)
    });
    let (lo, hi) = (segs.offset(lo)?, segs.offset(hi.saturating_sub(1))? + 1);
    let p = image.display();
    let base = p.rsplit('/').next().unwrap_or(&p);
    let mut name = format!("[{base}+0x{lo:x}..0x{hi:x}");
    if let Some(p) = prev {
        name += &format!(" after {}", demangle(p.name.clone()));
    }
    name.push(']');
    Some(SymInfo {
        name,
        range: Some((lo, hi)),
        ..Default::default()
    })
}

/// A blazesym symbolizer that leaves names as they are: its demangler
/// tries cpp_demangle on every name, which reads a C function called `a`,
/// `b` or `c` as the mangled types `signed char`, `bool` and `char`
/// (blazesym 0.2.7, `maybe_demangle_impl`); [`demangle`] is used instead.
fn new_symbolizer() -> blazesym::symbolize::Symbolizer {
    blazesym::symbolize::Symbolizer::builder()
        .enable_demangling(false)
        .build()
}

/// Demangles Rust (`_R...`, or legacy `_ZN...E` with a hash) and C++
/// (`_Z...`) names; any other name is a C name and stays as it is.
pub fn demangle(name: String) -> String {
    if !name.starts_with("_Z") && !name.starts_with("_R") {
        return name;
    }
    if let Ok(d) = rustc_demangle::try_demangle(&name) {
        return format!("{d:#}");
    }
    cpp_demangle::Symbol::new(name.as_bytes())
        .ok()
        .and_then(|s| s.demangle().ok())
        .map(|d| empty_packs(&d))
        .unwrap_or(name)
}

/// cpp_demangle 0.5 prints an empty template or function parameter pack
/// as an empty list element (`AnalysisManager<llvm::Module, >`); c++filt
/// prints nothing (`AnalysisManager<llvm::Module>`). No C++ name has an
/// empty element, so the separator around one is dropped.
fn empty_packs(d: &str) -> String {
    let mut s = d.to_string();
    loop {
        let t = s
            .replace(", , ", ", ")
            .replace(", >", ">")
            .replace(", )", ")")
            .replace("<, ", "<")
            .replace("(, ", "(");
        if t == s {
            return s;
        }
        s = t;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mangled_names_are_demangled() {
        for c in ["a", "b", "c", "main", "_start", "Z", "lib_work"] {
            assert_eq!(demangle(c.into()), c);
        }
        assert_eq!(demangle("_Z3fooi".into()), "foo(int)");
        assert_eq!(
            demangle("_ZN4core9panicking9panic_fmt17h5f1a6fd39197ad62E".into()),
            "core::panicking::panic_fmt"
        );
        assert_eq!(demangle("_Znot valid".into()), "_Znot valid");
        // an empty parameter pack, as c++filt prints it (issue 33: the
        // report printed `AnalysisManager<llvm::Module, >`)
        assert_eq!(
            demangle("_ZN4llvm15AnalysisManagerINS_6ModuleEJEE9getResultERS1_".into()),
            "llvm::AnalysisManager<llvm::Module>::getResult(llvm::Module&)"
        );
        assert_eq!(
            demangle("_ZN4llvm15AnalysisManagerINS_6ModuleEJiEE9getResultERS1_i".into()),
            "llvm::AnalysisManager<llvm::Module, int>::getResult(llvm::Module&, int)"
        );
        assert_eq!(empty_packs("f<, a, , b, >(, x, )"), "f<a, b>(x)");
    }
    #[test]
    fn jit_map() {
        let (text, dropped) = JitMap::clean("1000 10 foo\n0x2000 0x20 bar baz\nbad line\n");
        assert_eq!(dropped, 1);
        let m = crate::parse::jit_map(text.as_bytes()).unwrap();
        assert_eq!(m.lookup(0x1005), Some("foo"));
        assert_eq!(m.lookup(0x1010), None);
        assert_eq!(m.lookup(0x201f), Some("bar baz"));
        assert_eq!(m.lookup(0x10), None);
        // an entry ending at the top of the address space (overflowed
        // in the lookup before)
        let m = JitMap::from_entries(vec![(u64::MAX - 1, u64::MAX, "top".into())]);
        assert_eq!(m.lookup(u64::MAX), Some("top"));
    }
}
