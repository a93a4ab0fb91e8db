//! A validated view of a linked x86-64 ELF file (executable or shared
//! library): header, program headers, section headers and the dynamic
//! table, read from the bytes with every offset checked. Pure.
//!
//! The file is a claim: a field that points outside the file, a table
//! that does not fit, a missing dynamic table is an [`Error`], never a
//! panic (tests/linked.rs corrupts real files to check it).

use crate::Error;
use object::elf;

fn bad(what: impl Into<String>) -> Error {
    Error::Malformed(what.into())
}

/// Little-endian reads with bounds checks.
pub(crate) fn u16_at(d: &[u8], o: u64) -> Result<u16, Error> {
    let o = usize::try_from(o).map_err(|_| bad("offset beyond the file"))?;
    d.get(o..o.wrapping_add(2))
        .and_then(|b| b.try_into().ok())
        .map(u16::from_le_bytes)
        .ok_or_else(|| bad(format!("offset {o:#x} beyond the file")))
}

pub(crate) fn u32_at(d: &[u8], o: u64) -> Result<u32, Error> {
    let o = usize::try_from(o).map_err(|_| bad("offset beyond the file"))?;
    d.get(o..o.wrapping_add(4))
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| bad(format!("offset {o:#x} beyond the file")))
}

pub(crate) fn u64_at(d: &[u8], o: u64) -> Result<u64, Error> {
    let o = usize::try_from(o).map_err(|_| bad("offset beyond the file"))?;
    d.get(o..o.wrapping_add(8))
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| bad(format!("offset {o:#x} beyond the file")))
}

/// `len` bytes at file offset `o`.
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
    fn read(d: &[u8], o: u64) -> Result<Self, Error> {
        Ok(Phdr {
            p_type: u32_at(d, o)?,
            p_flags: u32_at(d, o + 4)?,
            p_offset: u64_at(d, o + 8)?,
            p_vaddr: u64_at(d, o + 16)?,
            p_paddr: u64_at(d, o + 24)?,
            p_filesz: u64_at(d, o + 32)?,
            p_memsz: u64_at(d, o + 40)?,
            p_align: u64_at(d, o + 48)?,
        })
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
    pub(crate) fn parse(data: &'d [u8]) -> Result<Self, Error> {
        if !data.starts_with(&elf::ELFMAG) {
            return Err(bad("no ELF magic"));
        }
        // e_ident[EI_CLASS], e_ident[EI_DATA]
        if data.get(4) != Some(&elf::ELFCLASS64) || data.get(5) != Some(&elf::ELFDATA2LSB) {
            return Err(Error::Unsupported("not a 64-bit little-endian file".into()));
        }
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
        let e_entry = u64_at(data, 24)?;
        let phoff = u64_at(data, 32)?;
        let shoff = u64_at(data, 40)?;
        let phentsize = u16_at(data, 54)?;
        let phnum = u16_at(data, 56)?;
        let shentsize = u16_at(data, 58)?;
        let shnum = u16_at(data, 60)?;
        if u64::from(phentsize) != PHDR_SIZE {
            return Err(bad(format!("program header size {phentsize}")));
        }
        if phnum == 0 || phnum == u16::MAX {
            return Err(bad(format!("{phnum} program headers")));
        }
        let phdrs = (0..u64::from(phnum))
            .map(|i| Phdr::read(data, phoff.saturating_add(i * PHDR_SIZE)))
            .collect::<Result<Vec<_>, _>>()?;
        if shnum != 0 && u64::from(shentsize) != SHDR_SIZE {
            return Err(bad(format!("section header size {shentsize}")));
        }
        let shdrs = (0..u64::from(shnum))
            .map(|i| {
                let at = shoff.saturating_add(i * SHDR_SIZE);
                Ok(Shdr {
                    at,
                    sh_type: u32_at(data, at + 4)?,
                    sh_addr: u64_at(data, at + 16)?,
                    sh_size: u64_at(data, at + 32)?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
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
        let raw = bytes_at(data, dynp.p_offset, dynp.p_filesz)?;
        let mut dynamic = Vec::new();
        for e in raw.chunks_exact(DYN_SIZE as usize) {
            let tag = i64::from_le_bytes(e[..8].try_into().unwrap_or_default());
            let val = u64::from_le_bytes(e[8..].try_into().unwrap_or_default());
            if tag == elf::DT_NULL as i64 {
                break;
            }
            dynamic.push((tag, val));
        }
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
