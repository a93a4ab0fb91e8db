//! Writes a planned rewrite of a linked file: the original bytes with the
//! sites patched, followed by three new PT_LOAD segments. Pure (builds
//! bytes in memory).
//!
//! ```text
//! R   new program header table (old + 3), .dynstr + the runtime's path
//!     and n routine names, .dynsym + n undefined symbols, .gnu.version
//!     + n, .hash (nchain + n), .rela.dyn + n R_X86_64_GLOB_DAT
//! R+X the object rewriter's stub section, then n thunks `jmp [rip+slot]`
//! R+W new .dynamic (a DT_NEEDED on libmantle-instr added), n slots that
//!     the GLOB_DATs fill with the runtime's routines
//! ```
//!
//! The stubs call the runtime through the thunks with the same 5-byte
//! `call rel32` as in an object (the runtime may rely on the layout
//! around its return address), like a PLT.
//!
//! The old tables stay where they were (unused); PT_PHDR, PT_DYNAMIC,
//! e_phoff and the section headers of the moved tables point at the new
//! ones. The dynamic loader thus loads the runtime and binds the stubs'
//! slots itself: no LD_PRELOAD, no code that runs before main, and a
//! dlopen()ed rewritten library works like one loaded at start.

use super::applied::{Applied, Rel, Target};
use super::image::{bytes_at, u32_at, Image, Phdr, DYN_SIZE, PHDR_SIZE, RELA_SIZE, SYM_SIZE};
use crate::rewrite::{cet_words, FEATURE_IBT_SHSTK, INT3};
use crate::Error;
use object::elf;
use std::collections::HashMap;

const PAGE: u64 = 4096;
/// A thunk: `jmp qword ptr [rip + slot]`, padded to 8 bytes.
const THUNK: u64 = 8;

/// Where each section of the planning builder lies: (sh_addr, sh_offset)
/// by builder section index.
pub(crate) type Sections = HashMap<usize, (u64, u64)>;

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

fn pad(v: &mut Vec<u8>, a: usize) {
    while !v.len().is_multiple_of(a) {
        v.push(0);
    }
}

fn rel32(from_end: u64, to: u64) -> Result<[u8; 4], Error> {
    let d = to.wrapping_sub(from_end) as i64;
    i32::try_from(d)
        .map(i32::to_le_bytes)
        .map_err(|_| Error::Unsupported(format!("{to:#x} is out of 32-bit reach of {from_end:#x}")))
}

/// Addresses the relocations resolve against.
struct Place<'a> {
    secs: &'a Sections,
    stubs: u64,
    thunks: u64,
}

impl Place<'_> {
    fn addr(&self, t: Target) -> Result<u64, Error> {
        Ok(match t {
            Target::Section(s, v) => {
                let &(a, _) = self
                    .secs
                    .get(&s)
                    .ok_or_else(|| Error::Malformed("relocation against no section".into()))?;
                a.wrapping_add(v)
            }
            Target::Stubs(v) => self.stubs + v,
            Target::Import(i) => self.thunks + THUNK * i as u64,
        })
    }

    /// Applies `rels` to `code` placed at `base`: S + A - P, 32 bits.
    fn resolve(&self, code: &mut [u8], base: u64, rels: &[Rel]) -> Result<(), Error> {
        for r in rels {
            let p = base + r.offset;
            let v = self
                .addr(r.target)?
                .wrapping_add(r.addend as u64)
                .wrapping_sub(p) as i64;
            let v = i32::try_from(v).map_err(|_| {
                Error::Unsupported(format!("a field at {p:#x} is out of 32-bit reach"))
            })?;
            let at = r.offset as usize;
            code.get_mut(at..at + 4)
                .ok_or_else(|| Error::Malformed("relocation beyond its section".into()))?
                .copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
}

/// Offsets (into the R segment) and sizes of the copied tables.
#[derive(Default)]
struct Tables {
    strtab: u64,
    strsz: u64,
    symtab: u64,
    /// Index of the first added symbol.
    nsyms: u64,
    versym: Option<u64>,
    hash: Option<u64>,
    rela: u64,
    relasz: u64,
    /// String offsets of the runtime's path and of the imports.
    names: Vec<u64>,
}

fn need(img: &Image<'_>, tag: u32, what: &str) -> Result<u64, Error> {
    img.dyn_val(tag)
        .ok_or_else(|| Error::Malformed(format!("dynamic table without {what}")))
}

/// Copies the dynamic string, symbol, version, hash and relocation tables
/// into `r`, each grown by the runtime's entries.
fn copy_tables(
    img: &Image<'_>,
    r: &mut Vec<u8>,
    runtime: &[u8],
    imports: &[Vec<u8>],
) -> Result<Tables, Error> {
    let mut t = Tables::default();
    let strtab = need(img, elf::DT_STRTAB, "DT_STRTAB")?;
    let strsz = need(img, elf::DT_STRSZ, "DT_STRSZ")?;
    pad(r, 8);
    t.strtab = r.len() as u64;
    r.extend_from_slice(img.bytes_at_addr(strtab, strsz)?);
    r.push(0);
    for name in std::iter::once(runtime).chain(imports.iter().map(Vec::as_slice)) {
        t.names.push(r.len() as u64 - t.strtab);
        r.extend_from_slice(name);
        r.push(0);
    }
    t.strsz = r.len() as u64 - t.strtab;

    let symtab = need(img, elf::DT_SYMTAB, "DT_SYMTAB")?;
    let hash = img.dyn_val(elf::DT_HASH);
    t.nsyms = match (img.section_at(elf::SHT_DYNSYM, symtab), hash) {
        (Some(s), _) => s.sh_size / SYM_SIZE,
        (None, Some(h)) => u64::from(u32_at(img.bytes_at_addr(h, 8)?, 4)?),
        (None, None) => {
            return Err(Error::Unsupported(
                "cannot count the dynamic symbols: no section headers and no DT_HASH".into(),
            ))
        }
    };
    if t.nsyms == 0 || t.nsyms > 1 << 24 {
        return Err(Error::Malformed(format!("{} dynamic symbols", t.nsyms)));
    }
    pad(r, 8);
    t.symtab = r.len() as u64;
    r.extend_from_slice(img.bytes_at_addr(symtab, t.nsyms * SYM_SIZE)?);
    for name in &t.names[1..] {
        r.extend_from_slice(&(*name as u32).to_le_bytes());
        r.push(elf::STB_GLOBAL << 4 | elf::STT_FUNC);
        r.push(elf::STV_DEFAULT);
        r.extend_from_slice(&[0; 2 + 8 + 8]); // SHN_UNDEF, value, size
    }
    if let Some(v) = img.dyn_val(elf::DT_VERSYM) {
        pad(r, 8);
        t.versym = Some(r.len() as u64);
        r.extend_from_slice(img.bytes_at_addr(v, t.nsyms * 2)?);
        for _ in imports {
            r.extend_from_slice(&elf::VER_NDX_GLOBAL.to_le_bytes());
        }
    }
    if let Some(h) = hash {
        let head = img.bytes_at_addr(h, 8)?;
        let (nbucket, nchain) = (u64::from(u32_at(head, 0)?), u64::from(u32_at(head, 4)?));
        if nchain != t.nsyms {
            return Err(Error::Malformed(format!(
                "DT_HASH has {nchain} chains for {} symbols",
                t.nsyms
            )));
        }
        pad(r, 8);
        t.hash = Some(r.len() as u64);
        let at = r.len();
        r.extend_from_slice(img.bytes_at_addr(h, (2 + nbucket + nchain) * 4)?);
        let n = imports.len();
        r[at + 4..at + 8].copy_from_slice(&((nchain + n as u64) as u32).to_le_bytes());
        r.resize(r.len() + 4 * n, 0); // chains end at STN_UNDEF
    }
    pad(r, 8);
    t.rela = r.len() as u64;
    if let Some(rela) = img.dyn_val(elf::DT_RELA) {
        let mut sz = need(img, elf::DT_RELASZ, "DT_RELASZ")?;
        // Some linkers count .rela.plt in DT_RELASZ when it follows
        // .rela.dyn; glibc then subtracts it (elf/do-rel.h). Copy
        // .rela.dyn alone, so the PLT's relocations are not run twice.
        if let (Some(j), Some(jsz)) = (img.dyn_val(elf::DT_JMPREL), img.dyn_val(elf::DT_PLTRELSZ)) {
            if j >= rela && rela.checked_add(sz) == j.checked_add(jsz) {
                sz = j - rela;
            }
        }
        if sz % RELA_SIZE != 0 {
            return Err(Error::Malformed(format!("DT_RELASZ {sz}")));
        }
        r.extend_from_slice(img.bytes_at_addr(rela, sz)?);
    }
    r.resize(r.len() + RELA_SIZE as usize * imports.len(), 0); // filled in later
    t.relasz = r.len() as u64 - t.rela;
    Ok(t)
}

/// The new dynamic table (values relative to the R segment at `v_r`).
/// `first`: the runtime's DT_NEEDED before the program's own (it must
/// interpose on the unwinder), else after them.
fn dynamic(img: &Image<'_>, t: &Tables, v_r: u64, first: bool) -> Vec<u8> {
    let mut out: Vec<(i64, u64)> = Vec::new();
    let had_rela = img.dyn_val(elf::DT_RELA).is_some();
    let needed = img
        .dynamic
        .iter()
        .rposition(|&(tag, _)| tag == i64::from(elf::DT_NEEDED));
    let our_needed = (i64::from(elf::DT_NEEDED), t.names[0]);
    if needed.is_none() || first {
        out.push(our_needed);
    }
    for (i, &(tag, val)) in img.dynamic.iter().enumerate() {
        let val = match tag as u32 {
            elf::DT_STRTAB => v_r + t.strtab,
            elf::DT_STRSZ => t.strsz,
            elf::DT_SYMTAB => v_r + t.symtab,
            elf::DT_VERSYM => t.versym.map_or(val, |o| v_r + o),
            elf::DT_HASH => t.hash.map_or(val, |o| v_r + o),
            elf::DT_RELA => v_r + t.rela,
            elf::DT_RELASZ => t.relasz,
            _ => val,
        };
        out.push((tag, val));
        // After the program's own libraries: the runtime must not
        // interpose on anything they define.
        if Some(i) == needed && !first {
            out.push(our_needed);
        }
    }
    if !had_rela {
        out.push((i64::from(elf::DT_RELA), v_r + t.rela));
        out.push((i64::from(elf::DT_RELASZ), t.relasz));
        out.push((i64::from(elf::DT_RELAENT), RELA_SIZE));
    }
    out.push((i64::from(elf::DT_NULL), 0));
    let mut b = Vec::with_capacity(out.len() * DYN_SIZE as usize);
    for (tag, val) in out {
        b.extend_from_slice(&tag.to_le_bytes());
        b.extend_from_slice(&val.to_le_bytes());
    }
    b
}

fn put(out: &mut [u8], at: u64, bytes: &[u8]) -> Result<(), Error> {
    let at = usize::try_from(at).map_err(|_| Error::Malformed("offset".into()))?;
    out.get_mut(at..at + bytes.len())
        .ok_or_else(|| Error::Malformed(format!("offset {at:#x} beyond the file")))?
        .copy_from_slice(bytes);
    Ok(())
}

/// The rewritten file. `runtime` is the DT_NEEDED name of libmantle-instr,
/// listed `first` or after the file's own.
pub(crate) fn emit(
    img: &Image<'_>,
    ap: &Applied,
    secs: &Sections,
    runtime: &[u8],
    first: bool,
) -> Result<Vec<u8>, Error> {
    let loads: Vec<&Phdr> = img
        .phdrs
        .iter()
        .filter(|p| p.p_type == elf::PT_LOAD)
        .collect();
    let align = loads
        .iter()
        .map(|p| p.p_align)
        .max()
        .unwrap_or(PAGE)
        .max(PAGE);
    if !align.is_power_of_two() {
        return Err(Error::Malformed(format!("segment alignment {align:#x}")));
    }
    let max_end = loads
        .iter()
        .map(|p| p.p_vaddr + p.p_memsz)
        .max()
        .ok_or_else(|| Error::Malformed("no PT_LOAD segment".into()))?;
    let n_ph = img.phdrs.len() + 3;
    if n_ph >= usize::from(u16::MAX) {
        return Err(Error::Unsupported("too many program headers".into()));
    }
    let f_r = align_up(img.data.len() as u64, PAGE);
    let v_r = align_up(max_end, align)
        .checked_add(f_r % align)
        .ok_or_else(|| Error::Malformed("addresses overflow".into()))?;

    // R: the program headers (written last), then the tables.
    let mut r = vec![0u8; n_ph * PHDR_SIZE as usize];
    let n = ap.imports.len();
    let t = copy_tables(img, &mut r, runtime, &ap.imports)?;
    let f_x = f_r + align_up(r.len() as u64, PAGE);
    let v_x = v_r + (f_x - f_r);

    // R+X: the stubs, then the thunks.
    let mut code = ap.code.clone();
    pad(&mut code, 16);
    let place = Place {
        secs,
        stubs: v_x,
        thunks: v_x + code.len() as u64,
    };
    let f_w = f_x + align_up(code.len() as u64 + THUNK * n as u64, PAGE);
    let v_w = v_r + (f_w - f_r);
    let mut rw = dynamic(img, &t, v_r, first);
    let dyn_len = rw.len() as u64;
    pad(&mut rw, 8);
    let slots: Vec<u64> = (0..n)
        .map(|i| v_w + rw.len() as u64 + 8 * i as u64)
        .collect();
    rw.resize(rw.len() + 8 * n, 0);
    for slot in &slots {
        let end = v_x + code.len() as u64 + 6;
        code.extend_from_slice(&[0xff, 0x25]);
        code.extend_from_slice(&rel32(end, *slot)?);
        code.extend_from_slice(&[INT3, INT3]);
    }
    place.resolve(&mut code, v_x, &ap.code_relocs)?;

    // The GLOB_DAT relocations that fill the slots.
    let first_new = (t.rela + t.relasz) as usize - RELA_SIZE as usize * n;
    for (i, slot) in slots.iter().enumerate() {
        let at = first_new + i * RELA_SIZE as usize;
        let info = ((t.nsyms + i as u64) << 32) | u64::from(elf::R_X86_64_GLOB_DAT);
        r[at..at + 8].copy_from_slice(&slot.to_le_bytes());
        r[at + 8..at + 16].copy_from_slice(&info.to_le_bytes());
    }

    // Program headers: PT_PHDR and PT_DYNAMIC moved, three loads added
    // behind the last (loads stay in address order, as ld.so requires).
    let last_load = img
        .phdrs
        .iter()
        .rposition(|p| p.p_type == elf::PT_LOAD)
        .unwrap_or(0);
    let seg = |flags, offset, vaddr, size| Phdr {
        p_type: elf::PT_LOAD,
        p_flags: flags,
        p_offset: offset,
        p_vaddr: vaddr,
        p_paddr: vaddr,
        p_filesz: size,
        p_memsz: size,
        p_align: align,
    };
    let mut ph = Vec::with_capacity(n_ph * PHDR_SIZE as usize);
    for (i, p) in img.phdrs.iter().enumerate() {
        let mut p = *p;
        match p.p_type {
            elf::PT_PHDR => {
                (p.p_offset, p.p_vaddr, p.p_paddr) = (f_r, v_r, v_r);
                (p.p_filesz, p.p_memsz) = (n_ph as u64 * PHDR_SIZE, n_ph as u64 * PHDR_SIZE);
            }
            elf::PT_DYNAMIC => {
                (p.p_offset, p.p_vaddr, p.p_paddr) = (f_w, v_w, v_w);
                (p.p_filesz, p.p_memsz) = (dyn_len, dyn_len);
            }
            _ => {}
        }
        p.write(&mut ph);
        if i == last_load {
            seg(elf::PF_R, f_r, v_r, r.len() as u64).write(&mut ph);
            seg(elf::PF_R | elf::PF_X, f_x, v_x, code.len() as u64).write(&mut ph);
            seg(elf::PF_R | elf::PF_W, f_w, v_w, rw.len() as u64).write(&mut ph);
        }
    }
    r[..ph.len()].copy_from_slice(&ph);

    let mut out = img.data.to_vec();
    // The patched sections: the sites and exits, their fields resolved.
    for (sec, bytes, rels) in &ap.patched {
        let &(addr, off) = secs
            .get(sec)
            .ok_or_else(|| Error::Malformed("patch in no section".into()))?;
        let mut bytes = bytes.clone();
        place.resolve(&mut bytes, addr, rels)?;
        put(&mut out, off, &bytes)?;
    }
    if ap.cet_cleared {
        clear_cet(img, &mut out)?;
    }
    // The header and the section headers of the moved tables.
    put(&mut out, 32, &f_r.to_le_bytes())?;
    put(&mut out, 56, &(n_ph as u16).to_le_bytes())?;
    let old_dyn = img
        .phdrs
        .iter()
        .find(|p| p.p_type == elf::PT_DYNAMIC)
        .map_or(0, |p| p.p_vaddr);
    let moved = [
        (elf::SHT_DYNAMIC, Some(old_dyn), Some((f_w, v_w, dyn_len))),
        (
            elf::SHT_STRTAB,
            img.dyn_val(elf::DT_STRTAB),
            Some((f_r + t.strtab, v_r + t.strtab, t.strsz)),
        ),
        (
            elf::SHT_DYNSYM,
            img.dyn_val(elf::DT_SYMTAB),
            Some((
                f_r + t.symtab,
                v_r + t.symtab,
                (t.nsyms + n as u64) * SYM_SIZE,
            )),
        ),
        (
            elf::SHT_GNU_VERSYM,
            img.dyn_val(elf::DT_VERSYM),
            t.versym
                .map(|o| (f_r + o, v_r + o, (t.nsyms + n as u64) * 2)),
        ),
        (
            elf::SHT_HASH,
            img.dyn_val(elf::DT_HASH),
            t.hash.map(|o| (f_r + o, v_r + o, 0)),
        ),
        (
            elf::SHT_RELA,
            img.dyn_val(elf::DT_RELA),
            Some((f_r + t.rela, v_r + t.rela, t.relasz)),
        ),
    ];
    for (ty, old, new) in moved {
        let (Some(old), Some((o, v, size))) = (old, new) else {
            continue;
        };
        if let Some(sh) = img.section_at(ty, old) {
            let size = if ty == elf::SHT_HASH {
                sh.sh_size + 4 * n as u64
            } else {
                size
            };
            put(&mut out, sh.at + 16, &v.to_le_bytes())?;
            put(&mut out, sh.at + 24, &o.to_le_bytes())?;
            put(&mut out, sh.at + 32, &size.to_le_bytes())?;
        }
    }
    out.resize(f_r as usize, 0);
    out.extend_from_slice(&r);
    out.resize(f_x as usize, 0);
    out.extend_from_slice(&code);
    out.resize(f_w as usize, 0);
    out.extend_from_slice(&rw);
    Ok(out)
}

/// Clears IBT and SHSTK in PT_GNU_PROPERTY: a return frame's `ret` would
/// fault on a shadow stack, and the stubs call the runtime indirectly,
/// which lands without `endbr64`. glibc enables CET only when every
/// object is marked, so the process runs without it.
fn clear_cet(img: &Image<'_>, out: &mut [u8]) -> Result<(), Error> {
    for p in img
        .phdrs
        .iter()
        .filter(|p| p.p_type == elf::PT_GNU_PROPERTY)
    {
        let note = bytes_at(img.data, p.p_offset, p.p_filesz)?;
        for w in cet_words(note) {
            let v = u32_at(note, w as u64)? & !FEATURE_IBT_SHSTK;
            put(out, p.p_offset + w as u64, &v.to_le_bytes())?;
        }
    }
    Ok(())
}
