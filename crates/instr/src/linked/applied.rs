//! What the object rewriter ([`crate::rewrite::apply`]) made of the
//! planning builder, collected for placement in a linked file: the stub
//! section's code, the patched bytes of the original sections, their
//! relocations, and the runtime routines they name. Pure.
//!
//! Why through `rewrite::apply` instead of encoding stubs here: the linked
//! file gets exactly the sites, stubs, trampolines and exit stubs an object
//! gets, whatever the object rewriter's design is; this side only places
//! the code and resolves the relocations (a small static link).

use super::emit::Sections;
use crate::Error;
use object::build::elf::{Builder, SectionData, SectionId};
use object::build::Id;
use object::elf;
use std::collections::HashMap;

/// What a relocation's symbol resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// An original section (builder index) plus a section offset.
    Section(usize, u64),
    /// An offset into the stub code.
    Stubs(u64),
    /// The n-th runtime routine (reached through a thunk and a slot).
    Import(usize),
}

/// A PC-relative 32-bit relocation: S + A - P.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rel {
    pub offset: u64,
    pub target: Target,
    pub addend: i64,
}

/// The rewrite to place.
pub(crate) struct Applied {
    pub code: Vec<u8>,
    pub code_relocs: Vec<Rel>,
    /// Per patched original section (builder index): its new bytes and
    /// relocations.
    pub patched: Vec<(usize, Vec<u8>, Vec<Rel>)>,
    /// The undefined symbols named (the runtime's routines), by first use.
    pub imports: Vec<Vec<u8>>,
    /// The object rewriter cleared the CET property: so must the file.
    pub cet_cleared: bool,
}

/// Collects what `rewrite::apply` changed in `b`; `secs` are the sections
/// the file had before (anything else is the stub section).
pub(crate) fn collect(
    b: &Builder<'_>,
    secs: &Sections,
    cet_before: bool,
) -> Result<Applied, Error> {
    let stub = b
        .sections
        .iter()
        .find(|s| {
            !secs.contains_key(&s.id().index())
                && s.sh_flags & u64::from(elf::SHF_EXECINSTR) != 0
                && matches!(s.data, SectionData::Data(_))
        })
        .map(|s| s.id());
    let mut imports: Vec<Vec<u8>> = Vec::new();
    let mut import_ix: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut relocs_of = |target: SectionId| -> Result<Vec<Rel>, Error> {
        let mut out = Vec::new();
        for s in b.sections.iter() {
            let SectionData::Relocation(rs) = &s.data else {
                continue;
            };
            if s.sh_info_section != Some(target) {
                continue;
            }
            for r in rs {
                if r.r_type != elf::R_X86_64_PC32 && r.r_type != elf::R_X86_64_PLT32 {
                    return Err(Error::Unsupported(format!(
                        "relocation type {} in the rewrite",
                        r.r_type
                    )));
                }
                let sym = b.symbols.get(
                    r.symbol
                        .ok_or_else(|| Error::Malformed("relocation without a symbol".into()))?,
                );
                let target = match sym.section {
                    Some(sec) if Some(sec) == stub => Target::Stubs(sym.st_value),
                    Some(sec) => Target::Section(sec.index(), sym.st_value),
                    None if !sym.name.is_empty() => {
                        let name = sym.name.to_vec();
                        let n = imports.len();
                        let i = *import_ix.entry(name.clone()).or_insert(n);
                        if i == n {
                            imports.push(name);
                        }
                        Target::Import(i)
                    }
                    None => return Err(Error::Malformed("relocation against nothing".into())),
                };
                out.push(Rel {
                    offset: r.r_offset,
                    target,
                    addend: r.r_addend,
                });
            }
        }
        Ok(out)
    };
    let data = |id: SectionId| match &b.sections.get(id).data {
        SectionData::Data(d) => d.to_vec(),
        _ => Vec::new(),
    };
    let (code, code_relocs) = match stub {
        Some(id) => (data(id), relocs_of(id)?),
        None => (Vec::new(), Vec::new()),
    };
    let mut patched = Vec::new();
    for s in b
        .sections
        .iter()
        .filter(|s| secs.contains_key(&s.id().index()))
    {
        let rels = relocs_of(s.id())?;
        if !rels.is_empty() {
            patched.push((s.id().index(), data(s.id()), rels));
        }
    }
    Ok(Applied {
        code,
        code_relocs,
        patched,
        imports,
        cet_cleared: cet_before && !crate::rewrite::has_cet(b),
    })
}
