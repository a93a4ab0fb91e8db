//! Separate debug files: the symbols of a stripped image from the debug
//! file its build ID names, as gdb and perf find them.
//!
//! Where (in this order): `DIR/.build-id/xx/yyyy.debug` for each debug
//! directory (default `/usr/lib/debug` and `/lib/debug`, where Debian's
//! `-dbgsym` packages put them; `report --debug-dir` replaces the list),
//! then the debuginfod client's cache (`$DEBUGINFOD_CACHE_PATH`, or
//! `$XDG_CACHE_HOME/debuginfod_client`, or `~/.cache/debuginfod_client`:
//! `BUILDID/debuginfo`), then, only when `DEBUGINFOD_URLS` is set and
//! `debuginfod-find` is installed, a download through it (elfutils'
//! client: its own timeout, `DEBUGINFOD_TIMEOUT`, default 10 s here).
//!
//! Why by build ID, and not through the image's `.gnu_debuglink`: blazesym
//! consults the build-ID directories only for images that have a debug
//! link, and the report hands it images as `/proc/self/fd/N` paths (so
//! that what is symbolized is the file that was checked), beside which no
//! debug file lies. A build ID names exactly the file it was split from.
//!
//! The debug file is read for its ELF symbol table only (no DWARF: a
//! debug file's own links are never followed), at virtual addresses: the
//! image's file offsets are converted with the image's own PT_LOAD
//! program headers ([`Segments`]), which `objcopy --only-keep-debug`
//! keeps identical in the debug file.
//!
//! Invariants: every file is opened as a regular file only, never
//! blocking ([`crate::files`]); a build ID that is not lower-case hex of
//! at least 4 digits names no path; program headers are read with checked
//! offsets by `object` (a malformed image has no segments, so no debug
//! symbols).

use crate::files;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian (and gdb's default) keeps split debug files.
pub const DEFAULT_DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// The relative path of a build ID's debug file: `.build-id/xx/yyyy.debug`.
pub fn build_id_path(build_id: &str) -> Option<PathBuf> {
    let ok = build_id.len() >= 4
        && build_id
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    ok.then(|| {
        let (head, rest) = build_id.split_at(2);
        Path::new(".build-id")
            .join(head)
            .join(format!("{rest}.debug"))
    })
}

/// The debuginfod client's cache directory (elfutils' rule).
fn debuginfod_cache() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DEBUGINFOD_CACHE_PATH") {
        return Some(PathBuf::from(p));
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(Path::new(&x).join("debuginfod_client"));
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/debuginfod_client"))
}

/// Downloads a debug file with `debuginfod-find` when `DEBUGINFOD_URLS`
/// is set; its path, as the tool prints it.
fn debuginfod_fetch(build_id: &str) -> Option<PathBuf> {
    if std::env::var_os("DEBUGINFOD_URLS").is_none_or(|u| u.is_empty()) {
        return None;
    }
    let mut c = Command::new("debuginfod-find");
    if std::env::var_os("DEBUGINFOD_TIMEOUT").is_none() {
        c.env("DEBUGINFOD_TIMEOUT", "10");
    }
    let out = c.args(["debuginfo", build_id]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let p = String::from_utf8(out.stdout).ok()?;
    Some(PathBuf::from(p.trim_end()))
}

/// The debug file of `build_id` in `dirs`, the debuginfod cache, or
/// through debuginfod; the file and where it was found.
pub fn find(build_id: &str, dirs: &[PathBuf]) -> Option<(File, PathBuf)> {
    let rel = build_id_path(build_id)?;
    let open = |p: PathBuf| files::open_regular(&p).ok().map(|f| (f, p));
    dirs.iter()
        .find_map(|d| open(d.join(&rel)))
        .or_else(|| open(debuginfod_cache()?.join(build_id).join("debuginfo")))
        .or_else(|| open(debuginfod_fetch(build_id)?))
}

/// The debug file an image's `.gnu_debuglink` names, where gdb looks for
/// it: beside the image (`DIR/NAME`), in `.debug/` beside it
/// (`DIR/.debug/NAME`), and under each debug directory at the image's own
/// directory (`/usr/lib/debug/DIR/NAME`). `image` is the image's real
/// path; the image itself is never its own debug file. With `crc` (the
/// link's CRC-32, checked when the image has no build ID to compare), a
/// candidate whose contents do not match is skipped.
pub fn find_by_link(
    image: &Path,
    name: &std::ffi::OsStr,
    dirs: &[PathBuf],
    crc: Option<u32>,
) -> Option<(File, PathBuf)> {
    let bytes = name.as_encoded_bytes();
    if bytes.is_empty() || bytes.contains(&b'/') || name == "." || name == ".." {
        return None;
    }
    let dir = image.parent()?;
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    let rel = dir.strip_prefix("/").unwrap_or(dir);
    candidates.extend(dirs.iter().map(|d| d.join(rel).join(name)));
    candidates.into_iter().find_map(|p| {
        if std::fs::canonicalize(&p).ok().as_deref() == Some(image) {
            return None;
        }
        let f = files::open_regular(&p).ok()?;
        if let Some(want) = crc {
            (crc32(&f)? == want).then_some(())?;
        }
        Some((f, p))
    })
}

/// The CRC-32 (IEEE, as `.gnu_debuglink` stores it) of a whole file.
fn crc32(f: &File) -> Option<u32> {
    let mut c = flate2::Crc::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut at = 0u64;
    loop {
        let n = f.read_at(&mut buf, at).ok()?;
        if n == 0 {
            return Some(c.sum());
        }
        c.update(&buf[..n]);
        at += n as u64;
    }
}

/// A file read with pread (`FileExt::read_at`) through `Read` and `Seek`,
/// for `object::ReadCache`: the shared file's own position is left alone.
pub struct Pread<'f> {
    f: &'f File,
    pos: u64,
}

impl<'f> Pread<'f> {
    pub fn new(f: &'f File) -> Self {
        Pread { f, pos: 0 }
    }
}

impl std::io::Read for Pread<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.f.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for Pread<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let base = match to {
            std::io::SeekFrom::Start(p) => Some(p),
            std::io::SeekFrom::End(d) => self.f.metadata()?.len().checked_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = base.ok_or(std::io::ErrorKind::InvalidInput)?;
        Ok(self.pos)
    }
}

/// The PT_LOAD segments of an ELF image: (p_offset, p_vaddr, p_filesz).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segments(pub Vec<(u64, u64, u64)>);

impl Segments {
    /// Reads the program headers of a 64-bit little-endian ELF file.
    pub fn read(f: &File) -> Segments {
        Self::parse(&object::ReadCache::new(Pread { f, pos: 0 })).unwrap_or_default()
    }

    /// The PT_LOAD program headers, read by `object` (which checks the
    /// entry size and that the table lies in the file). The identification
    /// is checked here rather than by `FileHeader::parse`, which also
    /// refuses an EI_VERSION other than 1: the kernel loads such a file, and
    /// its segments were read before. (`object` reads e_phoff 0 as "no
    /// program headers", where they were read at offset 0, over the ELF
    /// header itself: no image the kernel maps has that.)
    fn parse<'d, R: object::ReadRef<'d>>(data: R) -> Option<Segments> {
        use object::elf::{FileHeader64, ELFCLASS64, ELFDATA2LSB, ELFMAG, PT_LOAD};
        use object::read::elf::{FileHeader, ProgramHeader};
        let le = object::LittleEndian;
        let eh = data.read_at::<FileHeader64<object::LittleEndian>>(0).ok()?;
        let id = &eh.e_ident;
        if id.magic != ELFMAG || id.class != ELFCLASS64 || id.data != ELFDATA2LSB {
            return None;
        }
        let segs = eh
            .program_headers(le, data)
            .ok()?
            .iter()
            .filter(|h| h.p_type(le) == PT_LOAD)
            .map(|h| (h.p_offset(le), h.p_vaddr(le), h.p_filesz(le)))
            .collect();
        Some(Segments(segs))
    }

    /// The virtual address of file offset `off`, if a segment holds it.
    pub fn vaddr(&self, off: u64) -> Option<u64> {
        self.0
            .iter()
            .find(|&&(o, _, size)| off >= o && off - o < size)
            .map(|&(o, v, _)| v.wrapping_add(off - o))
    }

    /// The virtual address range \[start, end) of the segment holding
    /// `vaddr`.
    pub fn segment_of(&self, vaddr: u64) -> Option<(u64, u64)> {
        self.0
            .iter()
            .find(|&&(_, v, size)| vaddr >= v && vaddr - v < size)
            .map(|&(_, v, size)| (v, v.saturating_add(size)))
    }

    /// The file offset of virtual address `vaddr`, if a segment holds it.
    pub fn offset(&self, vaddr: u64) -> Option<u64> {
        self.0
            .iter()
            .find(|&&(_, v, size)| vaddr >= v && vaddr - v < size)
            .map(|&(o, v, _)| o.wrapping_add(vaddr - v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_paths() {
        assert_eq!(
            build_id_path("5c48e42c8ad3").unwrap(),
            Path::new(".build-id/5c/48e42c8ad3.debug")
        );
        for bad in ["", "abc", "../../etc", "5C48", "5c4/", "5c48 "] {
            assert_eq!(build_id_path(bad), None, "{bad:?}");
        }
    }

    fn elf(phdrs: &[(u32, u64, u64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&(phdrs.len() as u16).to_le_bytes());
        for &(t, off, vaddr, size) in phdrs {
            let mut h = vec![0u8; 56];
            h[..4].copy_from_slice(&t.to_le_bytes());
            h[8..16].copy_from_slice(&off.to_le_bytes());
            h[16..24].copy_from_slice(&vaddr.to_le_bytes());
            h[32..40].copy_from_slice(&size.to_le_bytes());
            b.extend(h);
        }
        b
    }

    fn parse(b: &[u8]) -> Option<Segments> {
        Segments::parse(b)
    }

    #[test]
    fn file_offsets_to_addresses() {
        // a PIE: text at offset 0x1000 = vaddr 0x1000; data at 0x2e10 =
        // vaddr 0x3e10; a PT_NOTE (4) is not a segment to load
        let b = elf(&[
            (1, 0, 0, 0x800),
            (1, 0x1000, 0x1000, 0x1800),
            (4, 0x300, 0x300, 0x40),
            (1, 0x2e10, 0x3e10, 0x200),
        ]);
        let s = parse(&b).unwrap();
        assert_eq!(s.0.len(), 3);
        assert_eq!(s.vaddr(0x1234), Some(0x1234));
        assert_eq!(s.vaddr(0x2e20), Some(0x3e20));
        assert_eq!(s.vaddr(0x300f), Some(0x400f));
        assert_eq!(s.vaddr(0x3010), None);
        assert_eq!(s.vaddr(0x2900), None);
    }

    /// Every truncation of a valid header table, and a wrong entry size
    /// or class, gives no segments, never a panic.
    #[test]
    fn malformed_headers_give_nothing() {
        let b = elf(&[(1, 0x1000, 0x1000, 0x2000)]);
        assert!(parse(&b).is_some());
        for len in 0..b.len() {
            assert_eq!(parse(&b[..len]), None, "length {len}");
        }
        let mut wrong = b.clone();
        wrong[54] = 32;
        assert_eq!(parse(&wrong), None);
        let mut class32 = b;
        class32[4] = 1;
        assert_eq!(parse(&class32), None);
    }
}
