//! Section groups (`SHT_GROUP`, gABI "Section Groups"), carried over by
//! hand: `object`'s builder (0.37, and still 0.40) fails on them
//! ("Unsupported section type 11").
//!
//! A group is a section holding a flags word (`GRP_COMDAT`) and its member
//! section indices; its `sh_link` is the symbol table and its `sh_info` the
//! signature symbol. C++ puts every inline function, template instance and
//! vtable in a COMDAT group (`.text._Z...`, its `.rela`, sometimes its
//! `.gcc_except_table`): the linker keeps the first group of a signature it
//! sees and discards every other copy, whole.
//!
//! How: [`read`] validates the groups of the input (a claim: a member
//! index out of range, flags other than `GRP_COMDAT`, a truncated table, a
//! member without `SHF_GROUP` or in two groups is an error); [`Groups::mask`]
//! gives the builder a copy where each group is a plain `SHT_PROGBITS`
//! section (so it reads the rest as usual); the rewrite adds the stubs
//! and trampolines of a function in a group to a stub section of that
//! group ([`Groups::add`]); [`Groups::restore`] then, just before the
//! builder writes, turns the groups back into `SHT_GROUP` with the output
//! indices of their members (any relocation section whose target is a
//! member joins the group too) and of the signature symbol. Both numberings
//! follow the builder's writer (sections in order, symbols locals first);
//! [`Groups::check`] re-reads the output and compares the members by name,
//! so a change in that order is an error, never a wrong file.
//!
//! Pure: no system calls.

use crate::Error;
use object::build::elf::{Builder, SectionId};
use object::build::Id;
use object::elf;
use object::read::elf::{FileHeader, SectionHeader, Sym};
use std::borrow::Cow;
use std::collections::HashMap;

/// One group of the input.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// Section header index of the group section.
    index: usize,
    /// File offset of its header's `sh_type`.
    type_at: usize,
    flags: u32,
    /// Input symbol index of the signature symbol.
    signature_sym: usize,
    /// The signature (the symbol's name; gas-style groups named by a
    /// section symbol use the section's name).
    pub signature: String,
    /// Members as builder section indices (an input section's header
    /// index - 1: the builder leaves out the null section), then the
    /// sections the rewrite added.
    members: Vec<usize>,
}

/// The groups of one object.
#[derive(Debug, Clone, Default)]
pub(crate) struct Groups {
    list: Vec<Group>,
    /// Member section (builder id index) -> group.
    of: HashMap<usize, usize>,
    big_endian: bool,
}

fn malformed(g: usize, what: impl std::fmt::Display) -> Error {
    Error::Malformed(format!("section group at index {g}: {what}"))
}

/// Reads and validates the section groups of an ELF64 file. A file whose
/// header or section table does not parse has no groups here: the builder
/// reports that error.
pub(crate) fn read(data: &[u8]) -> Result<Groups, Error> {
    let mut out = Groups::default();
    let Ok(h) = elf::FileHeader64::<object::Endianness>::parse(data) else {
        return Ok(out);
    };
    let Ok(endian) = h.endian() else {
        return Ok(out);
    };
    let Ok(secs) = h.sections(endian, data) else {
        return Ok(out);
    };
    let n = secs.len();
    out.big_endian = endian == object::Endianness::Big;
    // sections() read the table as an array of these, inside the file.
    let shoff = h.e_shoff(endian) as usize;
    let shentsize = std::mem::size_of::<elf::SectionHeader64<object::Endianness>>();
    let groups: Vec<usize> = (1..n)
        .filter(|&i| {
            secs.section(object::SectionIndex(i))
                .is_ok_and(|s| s.sh_type(endian) == elf::SHT_GROUP)
        })
        .collect();
    let in_group_flag = |i: usize| {
        secs.section(object::SectionIndex(i))
            .is_ok_and(|s| s.sh_flags(endian) & u64::from(elf::SHF_GROUP) != 0)
    };
    if groups.is_empty() {
        if let Some(i) = (1..n).find(|&i| in_group_flag(i)) {
            return Err(Error::Malformed(format!(
                "section at index {i} is flagged SHF_GROUP but no group lists it"
            )));
        }
        return Ok(out);
    }
    let symbols = secs
        .symbols(endian, data, elf::SHT_SYMTAB)
        .map_err(|e| Error::Malformed(format!("symbol table: {e}")))?;
    for g in groups {
        let s = secs
            .section(object::SectionIndex(g))
            .map_err(|e| malformed(g, e))?;
        if s.sh_link(endian) as usize != symbols.section().0 || symbols.is_empty() {
            return Err(malformed(g, "sh_link is not the symbol table"));
        }
        if s.sh_entsize(endian) != 4 {
            return Err(malformed(g, format!("entry size {}", s.sh_entsize(endian))));
        }
        let bytes = s
            .data(endian, data)
            .map_err(|_| malformed(g, "table beyond the file"))?;
        if bytes.len() % 4 != 0 {
            return Err(malformed(
                g,
                format!("{} bytes: not whole words", bytes.len()),
            ));
        }
        let word = |w: &[u8]| {
            let w = [w[0], w[1], w[2], w[3]];
            if endian == object::Endianness::Big {
                u32::from_be_bytes(w)
            } else {
                u32::from_le_bytes(w)
            }
        };
        let mut words = bytes.chunks_exact(4).map(word);
        let Some(flags) = words.next() else {
            return Err(malformed(g, "empty (no flags word)"));
        };
        let members = words;
        if flags & !elf::GRP_COMDAT != 0 {
            return Err(malformed(g, format!("flags {flags:#x} (only GRP_COMDAT)")));
        }
        let sig = s.sh_info(endian) as usize;
        let sym = symbols
            .symbol(object::SymbolIndex(sig))
            .ok()
            .filter(|_| sig != 0)
            .ok_or_else(|| malformed(g, format!("signature symbol {sig} out of range")))?;
        let mut name = symbols
            .symbol_name(endian, sym)
            .map_err(|e| malformed(g, e))?
            .to_vec();
        if name.is_empty() && sym.st_type() == elf::STT_SECTION {
            let sec = secs
                .section(object::SectionIndex(sym.st_shndx(endian).into()))
                .map_err(|e| malformed(g, e))?;
            name = secs
                .section_name(endian, sec)
                .map_err(|e| malformed(g, e))?
                .to_vec();
        }
        let mut list = Vec::with_capacity(bytes.len() / 4);
        for m in members {
            let m = m as usize;
            if m == 0 || m >= n || m == g {
                return Err(malformed(g, format!("member index {m} out of range")));
            }
            let ms = secs
                .section(object::SectionIndex(m))
                .map_err(|e| malformed(g, e))?;
            if matches!(
                ms.sh_type(endian),
                elf::SHT_NULL | elf::SHT_GROUP | elf::SHT_SYMTAB | elf::SHT_STRTAB
            ) {
                return Err(malformed(
                    g,
                    format!("member {m} has section type {}", ms.sh_type(endian)),
                ));
            }
            if !in_group_flag(m) {
                return Err(malformed(g, format!("member {m} is not flagged SHF_GROUP")));
            }
            if out.of.insert(m - 1, out.list.len()).is_some() {
                return Err(malformed(g, format!("member {m} is in two groups")));
            }
            list.push(m - 1);
        }
        out.list.push(Group {
            index: g,
            type_at: shoff + g * shentsize + 4,
            flags,
            signature_sym: sig,
            signature: String::from_utf8_lossy(&name).into_owned(),
            members: list,
        });
    }
    if let Some(i) = (1..n).find(|&i| in_group_flag(i) && !out.of.contains_key(&(i - 1))) {
        return Err(Error::Malformed(format!(
            "section at index {i} is flagged SHF_GROUP but no group lists it"
        )));
    }
    Ok(out)
}

impl Groups {
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The group `sec` (a builder section) belongs to.
    pub(crate) fn of(&self, sec: SectionId) -> Option<usize> {
        self.of.get(&sec.index()).copied()
    }

    pub(crate) fn signature(&self, g: usize) -> &str {
        &self.list[g].signature
    }

    /// `data` with every group section turned into `SHT_PROGBITS`, which
    /// the builder reads as plain bytes; unchanged without groups.
    pub(crate) fn mask<'a>(&self, data: &'a [u8]) -> Cow<'a, [u8]> {
        // read() found each header inside the section table.
        let at: Vec<usize> = self.list.iter().map(|g| g.type_at).collect();
        crate::as_progbits(data, &at, self.big_endian)
    }

    /// Adds a section the rewrite made to group `g`.
    pub(crate) fn add(&mut self, g: usize, sec: SectionId) {
        self.list[g].members.push(sec.index());
        self.of.insert(sec.index(), g);
    }

    /// Makes the groups `SHT_GROUP` again, with the output numbering of
    /// their members and signatures; returns what [`Groups::check`]
    /// expects of the output. Call just before `b.write`.
    pub(crate) fn restore(&mut self, b: &mut Builder<'_>) -> Result<Vec<Expected>, Error> {
        if self.list.is_empty() {
            return Ok(Vec::new());
        }
        // A relocation section the rewrite added for a member (a function
        // that had none) goes with it.
        let extra: Vec<(usize, SectionId)> = b
            .sections
            .iter()
            .filter(|s| self.of(s.id()).is_none())
            .filter_map(|s| Some((self.of(s.sh_info_section?)?, s.id())))
            .collect();
        for (g, s) in extra {
            self.add(g, s);
        }
        // The writer numbers what is left after deleting orphans.
        b.delete_orphans();
        let mut sec_out = HashMap::new();
        for (i, s) in b.sections.iter().enumerate() {
            sec_out.insert(s.id().index(), (i as u32 + 1, s.id()));
        }
        let locals = b.symbols.iter().filter(|s| s.st_bind() == elf::STB_LOCAL);
        let globals = b.symbols.iter().filter(|s| s.st_bind() != elf::STB_LOCAL);
        let mut sym_out = HashMap::new();
        for (i, s) in locals.chain(globals).enumerate() {
            sym_out.insert(s.id().index(), i as u32 + 1);
        }
        let mut expected = Vec::with_capacity(self.list.len());
        for g in &self.list {
            let sig = *sym_out
                .get(&(g.signature_sym - 1))
                .ok_or_else(|| malformed(g.index, "signature symbol dropped"))?;
            let mut words = g.flags.to_le_bytes().to_vec();
            let mut names = Vec::with_capacity(g.members.len());
            for &m in &g.members {
                let &(o, id) = sec_out
                    .get(&m)
                    .ok_or_else(|| malformed(g.index, "member section dropped"))?;
                words.extend_from_slice(&o.to_le_bytes());
                let s = b.sections.get_mut(id);
                s.sh_flags |= u64::from(elf::SHF_GROUP);
                names.push(s.name.to_vec());
            }
            let &(_, id) = sec_out
                .get(&(g.index - 1))
                .ok_or_else(|| malformed(g.index, "group section dropped"))?;
            let s = b.sections.get_mut(id);
            s.sh_type = elf::SHT_GROUP;
            s.sh_info = sig;
            s.sh_entsize = 4;
            s.sh_addralign = 4;
            s.data = object::build::elf::SectionData::Data(words.into());
            expected.push(Expected {
                signature: g.signature.clone(),
                members: names,
            });
        }
        Ok(expected)
    }
}

/// A group as the output must have it: its signature and its members'
/// names, in order.
pub(crate) struct Expected {
    signature: String,
    members: Vec<Vec<u8>>,
}

/// Re-reads the written file's groups and compares them with what
/// [`Groups::restore`] meant to write.
pub(crate) fn check(out: &[u8], expected: &[Expected]) -> Result<(), Error> {
    if expected.is_empty() {
        return Ok(());
    }
    let wrong = |what: String| Error::Malformed(format!("rewritten section groups: {what}"));
    let got = read(out)?;
    if got.list.len() != expected.len() {
        return Err(wrong(format!(
            "{} groups written, {} meant",
            got.list.len(),
            expected.len()
        )));
    }
    let h =
        elf::FileHeader64::<object::Endianness>::parse(out).map_err(|e| wrong(e.to_string()))?;
    let endian = h.endian().map_err(|e| wrong(e.to_string()))?;
    let secs = h.sections(endian, out).map_err(|e| wrong(e.to_string()))?;
    for (g, e) in got.list.iter().zip(expected) {
        let names: Vec<Vec<u8>> = g
            .members
            .iter()
            .map(|m| {
                secs.section(object::SectionIndex(m + 1))
                    .and_then(|s| secs.section_name(endian, s))
                    .map(<[u8]>::to_vec)
                    .map_err(|e| wrong(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        if g.signature != e.signature || names != e.members {
            return Err(wrong(format!(
                "group {} came out as {} with other members",
                e.signature, g.signature
            )));
        }
    }
    Ok(())
}
