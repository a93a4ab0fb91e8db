//! A validated view of a linked x86-64 ELF file (executable or shared
//! library): header, program headers, section headers and the dynamic
//! table, read from the bytes with every offset checked (by `object`'s raw
//! ELF64 types and `ReadRef`; the checks of what the rewrite needs are
//! mantle's, on top). Pure.
//!
//! The file is a claim: a field that points outside the file, a table
//! that does not fit, a missing dynamic table is an [`Error`], never a
//! panic (tests/linked.rs corrupts real files to check it).

use crate::Error;
use object::elf;
use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _};
use object::read::ReadRef as _;

fn bad(what: impl Into<String>) -> Error {
    Error::Malformed(what.into())
}

type Le = object::LittleEndian;
const LE: Le = object::LittleEndian;

/// The value at file offset `o`, read by `object` (bounds checked).
fn at<T: object::Pod>(d: &[u8], o: u64) -> Result<&T, Error> {
    d.read_at::<T>(o)
        .map_err(|_| bad(format!("offset {o:#x} beyond the file")))
}

/// Little-endian reads with bounds checks.
pub(crate) fn u16_at(d: &[u8], o: u64) -> Result<u16, Error> {
    at::<object::U16<Le>>(d, o).map(|v| v.get(LE))
}

pub(crate) fn u32_at(d: &[u8], o: u64) -> Result<u32, Error> {
    at::<object::U32<Le>>(d, o).map(|v| v.get(LE))
}

/// `len` bytes at file offset `o`. By hand, not `object`'s
/// `ReadRef::read_bytes_at`: that returns an empty range at any offset,
/// and an offset past the end is an error here even for 0 bytes (a
/// PT_DYNAMIC of no bytes outside the file).
pub(crate) fn bytes_at(d: &[u8], o: u64, len: u64) -> Result<&[u8], Error> {
    let end = o
        .checked_add(len)
        .filter(|&e| e <= d.len() as u64)
        .ok_or_else(|| bad(format!("{len} bytes at {o:#x} beyond the file")))?;
    Ok(&d[o as usize..end as usize])
}

/// An ELF64 program header (56 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Phdr {
    pub p_type: u32,
    pub p_flags: u32,
    pub p_offset: u64,
    pub p_vaddr: u64,
    pub p_paddr: u64,
    pub p_filesz: u64,
    pub p_memsz: u64,
    pub p_align: u64,
}

pub(crate) const PHDR_SIZE: u64 = 56;
pub(crate) const SHDR_SIZE: u64 = 64;
pub(crate) const DYN_SIZE: u64 = 16;
pub(crate) const SYM_SIZE: u64 = 24;
pub(crate) const RELA_SIZE: u64 = 24;

impl Phdr {
    fn from_elf(h: &elf::ProgramHeader64<Le>) -> Self {
        Phdr {
            p_type: h.p_type(LE),
            p_flags: h.p_flags(LE),
            p_offset: h.p_offset(LE),
            p_vaddr: h.p_vaddr(LE),
            p_paddr: h.p_paddr(LE),
            p_filesz: h.p_filesz(LE),
            p_memsz: h.p_memsz(LE),
            p_align: h.p_align(LE),
        }
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.p_type.to_le_bytes());
        out.extend_from_slice(&self.p_flags.to_le_bytes());
        for v in [
            self.p_offset,
            self.p_vaddr,
            self.p_paddr,
            self.p_filesz,
            self.p_memsz,
            self.p_align,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// The section header fields the rewrite reads or moves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shdr {
    /// File offset of this header (to patch it).
    pub at: u64,
    pub sh_type: u32,
    pub sh_addr: u64,
    pub sh_size: u64,
}

/// The linked file.
pub(crate) struct Image<'d> {
    pub data: &'d [u8],
    pub e_entry: u64,
    pub phdrs: Vec<Phdr>,
    pub shdrs: Vec<Shdr>,
    /// The dynamic table up to (without) DT_NULL: (tag, value).
    pub dynamic: Vec<(i64, u64)>,
}

/// Whether `data` claims to be a linked x86-64 ELF (executable or shared
/// library). Only the identification and e_type are looked at.
pub fn is_linked(data: &[u8]) -> bool {
    data.starts_with(&elf::ELFMAG)
        && u16_at(data, 16).is_ok_and(|t| t == elf::ET_EXEC || t == elf::ET_DYN)
}

impl<'d> Image<'d> {
    /// Reads the headers with `object`'s raw types. Not through its
    /// `FileHeader::parse`, `program_headers` and `section_headers`: parse
    /// takes the class and byte order for one error, where mantle tells
    /// "unsupported" (a 32-bit or big-endian file) from "malformed"; and the
    /// table getters read e_phoff or e_shoff 0 as "no table" and e_phnum
    /// 0xffff or e_shnum 0 as extended counts in section 0, which a linked
    /// file the rewrite accepts never has: the counts are taken literally
    /// and the tables must lie in the file.
    pub(crate) fn parse(data: &'d [u8]) -> Result<Self, Error> {
        if !data.starts_with(&elf::ELFMAG) {
            return Err(bad("no ELF magic"));
        }
        // e_ident[EI_CLASS], e_ident[EI_DATA]
        if data.get(4) != Some(&elf::ELFCLASS64) || data.get(5) != Some(&elf::ELFDATA2LSB) {
            return Err(Error::Unsupported("not a 64-bit little-endian file".into()));
        }
        // Type and machine first, as far as the file goes: a cut file of
        // another machine is "unsupported", not "malformed".
        let e_type = u16_at(data, 16)?;
        let machine = u16_at(data, 18)?;
        if machine != elf::EM_X86_64 {
            return Err(Error::Unsupported(format!(
                "machine {machine} is not x86-64 ({})",
                elf::EM_X86_64
            )));
        }
        if e_type != elf::ET_EXEC && e_type != elf::ET_DYN {
            return Err(Error::Unsupported(format!(
                "ELF type {e_type} is not an executable or shared library"
            )));
        }
        let h = at::<elf::FileHeader64<Le>>(data, 0)?;
        let e_entry = h.e_entry(LE);
        let phoff = h.e_phoff(LE);
        let shoff = h.e_shoff(LE);
        let phentsize = h.e_phentsize(LE);
        let phnum = h.e_phnum(LE);
        let shentsize = h.e_shentsize(LE);
        let shnum = h.e_shnum(LE);
        if u64::from(phentsize) != PHDR_SIZE {
            return Err(bad(format!("program header size {phentsize}")));
        }
        if phnum == 0 || phnum == u16::MAX {
            return Err(bad(format!("{phnum} program headers")));
        }
        let phdrs: Vec<Phdr> = data
            .read_slice_at::<elf::ProgramHeader64<Le>>(phoff, usize::from(phnum))
            .map_err(|_| {
                bad(format!(
                    "{phnum} program headers at {phoff:#x} beyond the file"
                ))
            })?
            .iter()
            .map(Phdr::from_elf)
            .collect();
        if shnum != 0 && u64::from(shentsize) != SHDR_SIZE {
            return Err(bad(format!("section header size {shentsize}")));
        }
        let shdrs = if shnum == 0 {
            Vec::new()
        } else {
            data.read_slice_at::<elf::SectionHeader64<Le>>(shoff, usize::from(shnum))
                .map_err(|_| {
                    bad(format!(
                        "{shnum} section headers at {shoff:#x} beyond the file"
                    ))
                })?
                .iter()
                .zip(0u64..)
                .map(|(s, i)| Shdr {
                    at: shoff + i * SHDR_SIZE,
                    sh_type: s.sh_type(LE),
                    sh_addr: s.sh_addr(LE),
                    sh_size: s.sh_size(LE),
                })
                .collect()
        };
        for p in phdrs.iter().filter(|p| p.p_type == elf::PT_LOAD) {
            if p.p_filesz > p.p_memsz
                || p.p_offset.checked_add(p.p_filesz).is_none()
                || p.p_vaddr.checked_add(p.p_memsz).is_none()
            {
                return Err(bad("a PT_LOAD segment with impossible sizes"));
            }
        }
        let dynp = phdrs
            .iter()
            .find(|p| p.p_type == elf::PT_DYNAMIC)
            .ok_or_else(|| {
                Error::Unsupported(
                    "a static executable (no dynamic table): no loader to bring the runtime".into(),
                )
            })?;
        // The whole segment must lie in the file; a partial entry at its
        // end is ignored.
        bytes_at(data, dynp.p_offset, dynp.p_filesz)?;
        let entries = data
            .read_slice_at::<elf::Dyn64<Le>>(dynp.p_offset, (dynp.p_filesz / DYN_SIZE) as usize)
            .map_err(|_| bad("the dynamic table beyond the file"))?;
        let dynamic = entries
            .iter()
            .map(|e| (e.d_tag.get(LE) as i64, e.d_val.get(LE)))
            .take_while(|&(tag, _)| tag != i64::from(elf::DT_NULL))
            .collect();
        let img = Image {
            data,
            e_entry,
            phdrs,
            shdrs,
            dynamic,
        };
        // A static PIE has a dynamic table but no loader: it relocates
        // itself and ignores DT_NEEDED, so the stubs' slots would stay 0.
        let program = e_type == elf::ET_EXEC
            || img.dyn_val(elf::DT_FLAGS_1).unwrap_or(0) & u64::from(elf::DF_1_PIE) != 0;
        if program && !img.phdrs.iter().any(|p| p.p_type == elf::PT_INTERP) {
            return Err(Error::Unsupported(
                "a static executable (no PT_INTERP): no loader to bring the runtime".into(),
            ));
        }
        Ok(img)
    }

    /// The value of the first dynamic entry with this tag.
    pub(crate) fn dyn_val(&self, tag: u32) -> Option<u64> {
        self.dynamic
            .iter()
            .find(|&&(t, _)| t == i64::from(tag))
            .map(|&(_, v)| v)
    }

    /// The file offset of `len` bytes at virtual address `v`, if a
    /// PT_LOAD segment holds them in the file.
    pub(crate) fn offset_of(&self, v: u64, len: u64) -> Result<u64, Error> {
        self.phdrs
            .iter()
            .filter(|p| p.p_type == elf::PT_LOAD)
            .find(|p| {
                v >= p.p_vaddr
                    && v.checked_add(len)
                        .is_some_and(|e| e <= p.p_vaddr + p.p_filesz)
            })
            .map(|p| p.p_offset + (v - p.p_vaddr))
            .ok_or_else(|| bad(format!("address {v:#x} is in no loaded part of the file")))
    }

    /// `len` bytes at virtual address `v`.
    pub(crate) fn bytes_at_addr(&self, v: u64, len: u64) -> Result<&'d [u8], Error> {
        bytes_at(self.data, self.offset_of(v, len)?, len)
    }

    /// The DT_SONAME of a shared library.
    pub(crate) fn soname(&self) -> Option<&'d [u8]> {
        let strtab = self.dyn_val(elf::DT_STRTAB)?;
        let strsz = self.dyn_val(elf::DT_STRSZ)?;
        let at = self.dyn_val(elf::DT_SONAME)?;
        let tab = self.bytes_at_addr(strtab, strsz).ok()?;
        let s = tab.get(usize::try_from(at).ok()?..)?;
        Some(&s[..s.iter().position(|&b| b == 0)?])
    }

    /// The section header at this address and of this type, if any.
    pub(crate) fn section_at(&self, sh_type: u32, addr: u64) -> Option<&Shdr> {
        self.shdrs
            .iter()
            .find(|s| s.sh_type == sh_type && s.sh_addr == addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal linked file: header, PT_INTERP, PT_LOAD over everything,
    /// PT_DYNAMIC with DT_STRTAB and DT_NULL.
    fn tiny(e_type: u16, machine: u16) -> Vec<u8> {
        let mut d = vec![0u8; 0x200];
        d[..4].copy_from_slice(&elf::ELFMAG);
        d[4] = elf::ELFCLASS64;
        d[5] = elf::ELFDATA2LSB;
        d[6] = 1;
        d[16..18].copy_from_slice(&e_type.to_le_bytes());
        d[18..20].copy_from_slice(&machine.to_le_bytes());
        d[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        d[54..56].copy_from_slice(&56u16.to_le_bytes());
        d[56..58].copy_from_slice(&3u16.to_le_bytes());
        let ph = |p_type: u32, off: u64, size: u64| Phdr {
            p_type,
            p_flags: elf::PF_R,
            p_offset: off,
            p_vaddr: off,
            p_paddr: off,
            p_filesz: size,
            p_memsz: size,
            p_align: 8,
        };
        let mut v = Vec::new();
        ph(elf::PT_INTERP, 0x100, 8).write(&mut v);
        ph(elf::PT_LOAD, 0, 0x200).write(&mut v);
        ph(elf::PT_DYNAMIC, 0x180, 32).write(&mut v);
        d[64..64 + v.len()].copy_from_slice(&v);
        d[0x180..0x188].copy_from_slice(&i64::from(elf::DT_STRTAB).to_le_bytes());
        d[0x188..0x190].copy_from_slice(&0x100u64.to_le_bytes());
        d
    }

    #[test]
    fn every_type_and_machine() {
        for t in 0..=u16::MAX {
            let ok = Image::parse(&tiny(t, elf::EM_X86_64)).is_ok();
            assert_eq!(ok, t == elf::ET_EXEC || t == elf::ET_DYN, "e_type {t}");
            assert_eq!(is_linked(&tiny(t, 0)), ok, "e_type {t}");
        }
        for m in 0..=u16::MAX {
            let ok = Image::parse(&tiny(elf::ET_DYN, m)).is_ok();
            assert_eq!(ok, m == elf::EM_X86_64, "e_machine {m}");
        }
    }

    #[test]
    fn dynamic_table_and_addresses() {
        let d = tiny(elf::ET_DYN, elf::EM_X86_64);
        let img = Image::parse(&d).unwrap();
        assert_eq!(img.dynamic, vec![(i64::from(elf::DT_STRTAB), 0x100)]);
        assert_eq!(img.dyn_val(elf::DT_STRTAB), Some(0x100));
        assert_eq!(img.dyn_val(elf::DT_SYMTAB), None);
        // Every address and length against the one 0x200-byte segment.
        for v in 0..0x210u64 {
            for len in [0, 1, 8, 0x200] {
                assert_eq!(
                    img.offset_of(v, len).is_ok(),
                    v + len <= 0x200,
                    "{v:#x}+{len}"
                );
            }
        }
        assert!(img.offset_of(u64::MAX, 2).is_err());
    }

    #[test]
    fn malformed_headers_are_errors() {
        let good = tiny(elf::ET_EXEC, elf::EM_X86_64);
        let with = |at: usize, bytes: &[u8]| {
            let mut d = good.clone();
            d[at..at + bytes.len()].copy_from_slice(bytes);
            Image::parse(&d).err().map(|e| e.to_string())
        };
        assert!(with(54, &55u16.to_le_bytes()).is_some(), "e_phentsize");
        assert!(
            with(56, &0u16.to_le_bytes()).is_some(),
            "no program headers"
        );
        assert!(
            with(56, &100u16.to_le_bytes()).is_some(),
            "headers beyond the file"
        );
        assert!(with(32, &u64::MAX.to_le_bytes()).is_some(), "e_phoff");
        // PT_LOAD with p_filesz > p_memsz.
        assert!(with(64 + 56 + 32, &0x300u64.to_le_bytes()).is_some());
        // No PT_INTERP: a static PIE/executable.
        let e = with(64, &elf::PT_NOTE.to_le_bytes()).unwrap();
        assert!(e.contains("static executable"), "{e}");
        // No PT_DYNAMIC.
        let e = with(64 + 112, &elf::PT_NOTE.to_le_bytes()).unwrap();
        assert!(e.contains("static executable"), "{e}");
        for len in 0..good.len() {
            let _ = Image::parse(&good[..len]);
        }
    }
}
