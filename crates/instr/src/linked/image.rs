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
