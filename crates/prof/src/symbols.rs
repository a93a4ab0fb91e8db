//! Symbols for the report: ELF symbol tables and DWARF through blazesym
//! (file offsets in, names out), the kernel through the session's kallsyms
//! snapshot, the vDSO through the session's copy of it, JIT code through the
//! /tmp/perf-PID.map files captured while recording. A file whose build ID
//! differs from the one recorded is reported and not symbolized (its
//! symbols would be someone else's).

use crate::debugfile::Segments;
use crate::files::{self, OpenError};
use crate::model::{Image, ImageKind, Kallsyms, Symbolizer};
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
    /// Per ELF image: its separate debug file and the image's segments,
    /// or None when it has none.
    debug: HashMap<Image, Option<(File, Segments)>>,
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

    /// Names the offsets still unnamed in `names` from the image's
    /// separate debug file, if it has one ([`crate::debugfile`]): found by
    /// the image's build ID, checked to carry that build ID, read for its
    /// symbol table at the virtual addresses of the offsets.
    fn name_from_debug_file(
        &mut self,
        image: &Image,
        offsets: &[u64],
        names: &mut [Option<String>],
    ) {
        if names.iter().all(Option::is_some) {
            return;
        }
        if !self.debug.contains_key(image) {
            let found = self.find_debug_file(image);
            if let Some((_, p, _)) = &found {
                self.debug_files.push((image.path.clone(), p.clone()));
            }
            self.debug
                .insert(image.clone(), found.map(|(d, _, segs)| (d, segs)));
        }
        let Some((d, segs)) = self.debug.get(image).and_then(Option::as_ref) else {
            return;
        };
        let (idx, addrs): (Vec<usize>, Vec<u64>) = (0..names.len())
            .filter(|&i| names[i].is_none())
            .filter_map(|i| segs.vaddr(offsets[i]).map(|a| (i, a)))
            .unzip();
        let mut elf = Elf::new(files::fd_path(d));
        // the symbol table only: a debug file's own links are not followed
        elf.debug_syms = false;
        let src = Source::Elf(elf);
        match guarded(|| self.sym.symbolize(&src, Input::VirtOffset(&addrs))) {
            Ok(Ok(v)) => {
                for (i, s) in idx.into_iter().zip(v) {
                    if let Symbolized::Sym(s) = s {
                        names[i] = Some(demangle(s.name.into_owned()));
                    }
                }
            }
            Ok(Err(_)) => {}
            Err(SymbolizerPanic) => self.warnings.push(format!(
                "{}: the symbolizer (blazesym) failed on its debug file: not symbolized from it",
                image.display()
            )),
        }
    }

    /// The debug file of a checked ELF image, where it was found, and the
    /// image's segments.
    fn find_debug_file(&self, image: &Image) -> Option<(File, PathBuf, Segments)> {
        let (f, _) = self.checked.get(image)?.as_ref()?;
        let id = image.build_id.clone().or_else(|| build_id_of(f))?;
        let (d, p) = crate::debugfile::find(&id, &self.debug_dirs)?;
        // the file the build ID's path names must carry that build ID
        (build_id_of(&d).as_deref() == Some(id.as_str())).then(|| (d, p, Segments::read(f)))
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
        let mut elf = Elf::new(files::fd_path(f));
        elf.debug_syms = debug_syms;
        let src = Source::Elf(elf);
        Ok(
            match guarded(|| sym.symbolize(&src, Input::FileOffset(offsets)))? {
                Ok(v) => v
                    .into_iter()
                    .map(|s| match s {
                        Symbolized::Sym(s) => Some(demangle(s.name.into_owned())),
                        Symbolized::Unknown(_) => None,
                    })
                    .collect(),
                Err(_) => vec![None; offsets.len()],
            },
        )
    }

    /// The outcome of [`Self::elf`], with a warning naming the image when
    /// blazesym failed.
    fn or_warn(
        &mut self,
        r: Result<Vec<Option<String>>, SymbolizerPanic>,
        image: &Image,
        n: usize,
    ) -> Vec<Option<String>> {
        r.unwrap_or_else(|SymbolizerPanic| {
            self.warnings.push(format!(
                "{}: the symbolizer (blazesym) failed on this file: not symbolized",
                image.display()
            ));
            vec![None; n]
        })
    }
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
            ImageKind::Elf => {
                // checks the file once; the borrow it returns would hold
                // `self`, so the checked file is looked up again
                let _ = self.usable(image);
                let Some((f, dwarf)) = self.checked.get(image).and_then(Option::as_ref) else {
                    return vec![None; offsets.len()];
                };
                let r = Self::elf(&self.sym, f, offsets, *dwarf);
                let mut names = self.or_warn(r, image, offsets.len());
                self.name_from_debug_file(image, offsets, &mut names);
                names
            }
            // its .dynsym names every vDSO function: no DWARF, and no file
            // the session's copy names is followed
            ImageKind::Vdso => match &self.vdso {
                Some(f) => {
                    let r = Self::elf(&self.sym, f, offsets, false);
                    self.or_warn(r, image, offsets.len())
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
        .unwrap_or(name)
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
