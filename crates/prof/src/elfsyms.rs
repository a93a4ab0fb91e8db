//! An ELF image's function symbols as users name them: every name at an
//! address (aliases), the public name among them, the symbol that
//! precedes an unnamed address, and where the unnamed functions of a
//! stripped image start (`.eh_frame_hdr`).
//!
//! Why: blazesym answers one name per address, whichever its table
//! holds first; glibc has up to four names at one address (`read`,
//! `__read`, `__libc_read`, `__GI___libc_read`), and perf shows the public
//! one. The rule here ([`best`]): global before weak before local, then
//! fewer leading underscores, then the shorter name, then the first in
//! byte order, so a report names a function the same way every time.
//! IFUNC implementations (`__memcpy_avx_unaligned_erms`) keep their own
//! name, with the IFUNC (`memcpy`) as an alias, so `--callers memcpy`
//! finds them.
//!
//! Invariants: files are read through `object`'s checked readers (a
//! malformed table gives no symbols, never a panic); only defined
//! function symbols (STT_FUNC, STT_GNU_IFUNC) are kept; `.eh_frame_hdr`
//! is read only in its common encoding (a sorted table of 4-byte
//! data-relative entries), anything else gives no function starts.

use crate::debugfile::Pread;
use std::fs::File;

/// A symbol's binding, ordered as [`best`] prefers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bind {
    Global,
    Weak,
    Local,
}

/// One defined function symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfSym {
    /// Virtual address (st_value).
    pub addr: u64,
    pub size: u64,
    pub name: String,
    pub bind: Bind,
    /// STT_GNU_IFUNC: the symbol is a resolver choosing an implementation.
    pub ifunc: bool,
}

/// The function symbols of an image (and its debug file), sorted by
/// address, with the starts of the functions `.eh_frame_hdr` lists.
#[derive(Debug, Clone, Default)]
pub struct ElfSyms {
    syms: Vec<ElfSym>,
    /// Sorted, deduplicated function start addresses from .eh_frame_hdr.
    fde_starts: Vec<u64>,
}

fn leading_underscores(s: &str) -> usize {
    s.bytes().take_while(|&c| c == b'_').count()
}

/// The name users know among symbols at one address: global before weak
/// before local, then fewer leading underscores, then shorter, then the
/// first in byte order.
pub fn best<'a>(v: impl IntoIterator<Item = &'a ElfSym>) -> Option<&'a ElfSym> {
    v.into_iter().min_by(|a, b| {
        a.bind
            .cmp(&b.bind)
            .then(leading_underscores(&a.name).cmp(&leading_underscores(&b.name)))
            .then(a.name.len().cmp(&b.name.len()))
            .then(a.name.cmp(&b.name))
    })
}

impl ElfSyms {
    /// From symbols (any order) and function starts: for tests and for
    /// merging.
    pub fn from_parts(mut syms: Vec<ElfSym>, mut fde_starts: Vec<u64>) -> ElfSyms {
        syms.sort_by(|a, b| a.addr.cmp(&b.addr).then(a.name.cmp(&b.name)));
        syms.dedup_by(|b, a| a.addr == b.addr && a.name == b.name);
        fde_starts.sort_unstable();
        fde_starts.dedup();
        ElfSyms { syms, fde_starts }
    }

    /// Reads `.symtab`, `.dynsym` and `.eh_frame_hdr` of a 64-bit
    /// little-endian ELF file (pread: the shared file position is left
    /// alone). Unreadable parts give nothing.
    pub fn read(f: &File) -> ElfSyms {
        let cache = object::ReadCache::new(Pread::new(f));
        let (syms, starts) = parse(&cache).unwrap_or_default();
        Self::from_parts(syms, starts)
    }

    /// Adds another file's symbols (a debug file's `.symtab`).
    pub fn merge(&mut self, other: ElfSyms) {
        let mut syms = std::mem::take(&mut self.syms);
        syms.extend(other.syms);
        let mut starts = std::mem::take(&mut self.fde_starts);
        starts.extend(other.fde_starts);
        *self = Self::from_parts(syms, starts);
    }

    /// The symbol of this name (the first, by address).
    pub fn find(&self, name: &str) -> Option<&ElfSym> {
        self.syms.iter().find(|s| s.name == name)
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// Every symbol whose value is `addr`.
    pub fn at(&self, addr: u64) -> &[ElfSym] {
        let lo = self.syms.partition_point(|s| s.addr < addr);
        let hi = self.syms.partition_point(|s| s.addr <= addr);
        &self.syms[lo..hi]
    }

    /// The public name of the function at `addr` ([`best`] of [`Self::at`]).
    pub fn best_at(&self, addr: u64) -> Option<&ElfSym> {
        best(self.at(addr))
    }

    /// The function that covers `addr` (start ≤ addr < start + size; a
    /// zero-sized symbol covers only its first byte), by its public name.
    pub fn covering(&self, addr: u64) -> Option<&ElfSym> {
        let hi = self.syms.partition_point(|s| s.addr <= addr);
        // the nearest start at or below addr that covers it
        let start = self.syms[..hi]
            .iter()
            .rev()
            .take(64)
            .find(|s| addr - s.addr < s.size.max(1))?
            .addr;
        self.best_at(start)
    }

    /// The nearest symbol starting at or below `addr` (its public name):
    /// for an unnamed address, what comes before it.
    pub fn preceding(&self, addr: u64) -> Option<&ElfSym> {
        let hi = self.syms.partition_point(|s| s.addr <= addr);
        let start = self.syms[..hi].last()?.addr;
        self.best_at(start)
    }

    /// The start of the next symbol above `addr`.
    pub fn next_start(&self, addr: u64) -> Option<u64> {
        let i = self.syms.partition_point(|s| s.addr <= addr);
        self.syms.get(i).map(|s| s.addr)
    }

    /// The unnamed function holding `addr` by `.eh_frame_hdr`: its start,
    /// and the next function's start (its end), when both are known.
    pub fn fde_range(&self, addr: u64) -> Option<(u64, u64)> {
        let i = self.fde_starts.partition_point(|&s| s <= addr);
        let start = *self.fde_starts.get(i.checked_sub(1)?)?;
        let end = *self.fde_starts.get(i)?;
        Some((start, end))
    }

    /// The other names users may type for the function `name` at `addr`:
    /// every other name at its address and, for an IFUNC implementation
    /// (`__memcpy_avx_unaligned_erms`), the IFUNC it implements (`memcpy`:
    /// an IFUNC symbol of this image whose name, between the leading `__`
    /// and the next `_`, is the implementation's).
    pub fn aliases(&self, addr: u64, name: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .at(addr)
            .iter()
            .filter(|s| s.name != name)
            .map(|s| s.name.clone())
            .collect();
        if let Some(base) = ifunc_base(name) {
            if self.syms.iter().any(|s| s.ifunc && s.name == base) {
                v.push(base.to_string());
            }
        }
        v.sort();
        v.dedup();
        v
    }
}

/// `__memcpy_avx_unaligned_erms` -> `memcpy`: the name an IFUNC
/// implementation is derived from (glibc's naming), if it has that shape.
fn ifunc_base(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("__")?;
    let (base, variant) = rest.split_once('_')?;
    (!base.is_empty() && !variant.is_empty() && !base.starts_with('_')).then_some(base)
}

type Parsed = (Vec<ElfSym>, Vec<u64>);

fn parse<'d, R: object::ReadRef<'d>>(data: R) -> Option<Parsed> {
    use object::elf::{
        FileHeader64, ELFCLASS64, ELFDATA2LSB, ELFMAG, SHN_UNDEF, SHT_DYNSYM, SHT_SYMTAB,
        STB_GLOBAL, STB_WEAK, STT_FUNC, STT_GNU_IFUNC,
    };
    use object::read::elf::{FileHeader, SectionHeader, Sym};
    let le = object::LittleEndian;
    let eh = data.read_at::<FileHeader64<object::LittleEndian>>(0).ok()?;
    let id = &eh.e_ident;
    if id.magic != ELFMAG || id.class != ELFCLASS64 || id.data != ELFDATA2LSB {
        return None;
    }
    let sections = eh.sections(le, data).ok()?;
    let mut syms = Vec::new();
    for kind in [SHT_SYMTAB, SHT_DYNSYM] {
        let Ok(table) = sections.symbols(le, data, kind) else {
            continue;
        };
        for s in table.iter() {
            let t = s.st_type();
            if (t != STT_FUNC && t != STT_GNU_IFUNC) || s.st_shndx(le) == SHN_UNDEF {
                continue;
            }
            let Ok(name) = table.symbol_name(le, s) else {
                continue;
            };
            if name.is_empty() {
                continue;
            }
            syms.push(ElfSym {
                addr: s.st_value(le),
                size: s.st_size(le),
                name: String::from_utf8_lossy(name).into_owned(),
                bind: match s.st_bind() {
                    STB_GLOBAL => Bind::Global,
                    STB_WEAK => Bind::Weak,
                    _ => Bind::Local,
                },
                ifunc: t == STT_GNU_IFUNC,
            });
        }
    }
    let mut starts = Vec::new();
    if let Some((_, sh)) = sections.section_by_name(le, b".eh_frame_hdr") {
        if let Ok(bytes) = sh.data(le, data) {
            starts = eh_frame_hdr_starts(bytes, sh.sh_addr(le)).unwrap_or_default();
        }
    }
    Some((syms, starts))
}

/// The function starts of an `.eh_frame_hdr` at virtual address `vaddr`:
/// its binary search table, in the encoding every linker writes
/// (version 1, table DW_EH_PE_datarel|sdata4, count udata4).
pub fn eh_frame_hdr_starts(b: &[u8], vaddr: u64) -> Option<Vec<u64>> {
    const UDATA4: u8 = 0x03;
    const DATAREL_SDATA4: u8 = 0x3b;
    const PCREL_SDATA4: u8 = 0x1b;
    let (&version, rest) = b.split_first()?;
    if version != 1 || rest.len() < 3 {
        return None;
    }
    let (ptr_enc, count_enc, table_enc) = (rest[0], rest[1], rest[2]);
    if count_enc != UDATA4 || table_enc != DATAREL_SDATA4 || ptr_enc != PCREL_SDATA4 {
        return None;
    }
    let le32 = |o: usize| -> Option<[u8; 4]> { b.get(o..o + 4)?.try_into().ok() };
    let count = u32::from_le_bytes(le32(8)?) as usize;
    // each entry: (initial location, FDE address), datarel sdata4
    let table = b.get(12..)?;
    if count > table.len() / 8 {
        return None;
    }
    Some(
        (0..count)
            .map(|i| {
                let rel = i32::from_le_bytes(le32(12 + i * 8).expect("in the table"));
                vaddr.wrapping_add_signed(rel as i64)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(addr: u64, size: u64, name: &str, bind: Bind) -> ElfSym {
        ElfSym {
            addr,
            size,
            name: name.into(),
            bind,
            ifunc: false,
        }
    }

    /// glibc's read: four names at one address; the public one wins,
    /// whatever order the tables list them in.
    #[test]
    fn public_name_among_aliases() {
        let names = [
            ("__GI___libc_read", Bind::Local),
            ("__libc_read", Bind::Global),
            ("__read", Bind::Global),
            ("read", Bind::Global),
        ];
        for rot in 0..names.len() {
            let v: Vec<ElfSym> = names
                .iter()
                .cycle()
                .skip(rot)
                .take(names.len())
                .map(|(n, b)| sym(0xf82a0, 157, n, *b))
                .collect();
            let s = ElfSyms::from_parts(v, vec![]);
            assert_eq!(s.best_at(0xf82a0).unwrap().name, "read");
            assert_eq!(s.covering(0xf82a0 + 100).unwrap().name, "read");
            assert_eq!(
                s.aliases(0xf82a0, "read"),
                ["__GI___libc_read", "__libc_read", "__read"]
            );
        }
        // a weak public name loses to a global one of the same underscores
        let s = ElfSyms::from_parts(
            vec![
                sym(1, 1, "fopen", Bind::Weak),
                sym(1, 1, "_IO_fopen", Bind::Global),
            ],
            vec![],
        );
        assert_eq!(s.best_at(1).unwrap().name, "_IO_fopen");
    }

    #[test]
    fn ifunc_implementations_alias_their_ifunc() {
        let mut memcpy = sym(0x9be70, 265, "memcpy", Bind::Global);
        memcpy.ifunc = true;
        let s = ElfSyms::from_parts(
            vec![
                memcpy,
                sym(0xa2d70, 40, "__memcpy_avx_unaligned_erms", Bind::Local),
                sym(0xa3000, 40, "__strlen_avx2", Bind::Local),
            ],
            vec![],
        );
        assert_eq!(
            s.aliases(0xa2d70, "__memcpy_avx_unaligned_erms"),
            ["memcpy"]
        );
        // strlen is no IFUNC of this image: no alias made up
        assert!(s.aliases(0xa3000, "__strlen_avx2").is_empty());
        assert_eq!(ifunc_base("__GI___libc_read"), Some("GI"));
        assert_eq!(ifunc_base("memcpy"), None);
    }

    #[test]
    fn covering_preceding_and_fde_ranges() {
        let s = ElfSyms::from_parts(
            vec![
                sym(0x1000, 0x20, "a", Bind::Global),
                sym(0x1100, 0, "b", Bind::Local),
            ],
            vec![0x1000, 0x1040, 0x1100, 0x1180],
        );
        assert_eq!(s.covering(0x101f).unwrap().name, "a");
        assert!(s.covering(0x1020).is_none());
        assert_eq!(s.covering(0x1100).unwrap().name, "b");
        assert!(s.covering(0x1101).is_none());
        assert_eq!(s.preceding(0x1050).unwrap().name, "a");
        assert!(s.preceding(0xfff).is_none());
        assert_eq!(s.next_start(0x1050), Some(0x1100));
        assert_eq!(s.fde_range(0x1050), Some((0x1040, 0x1100)));
        assert_eq!(s.fde_range(0x1190), None);
        assert_eq!(s.fde_range(0x10), None);
    }

    #[test]
    fn eh_frame_hdr_table() {
        let mut b = vec![1, 0x1b, 0x03, 0x3b];
        b.extend(0x100i32.to_le_bytes()); // eh_frame_ptr
        b.extend(2u32.to_le_bytes());
        for (loc, fde) in [(-0x800i32, 0x200i32), (-0x700, 0x240)] {
            b.extend(loc.to_le_bytes());
            b.extend(fde.to_le_bytes());
        }
        assert_eq!(
            eh_frame_hdr_starts(&b, 0x2000).unwrap(),
            vec![0x1800, 0x1900]
        );
        // a count larger than the table, or another encoding: nothing
        let mut big = b.clone();
        big[8] = 9;
        assert_eq!(eh_frame_hdr_starts(&big, 0x2000), None);
        let mut other = b.clone();
        other[3] = 0x1b;
        assert_eq!(eh_frame_hdr_starts(&other, 0x2000), None);
        for len in 0..b.len() {
            let _ = eh_frame_hdr_starts(&b[..len], 0);
        }
    }
}
