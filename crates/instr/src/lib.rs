//! mantle-instr: entry and exit instrumentation of compiled x86-64 code
//! by rewriting the file, after LOPI (Kågström, Paper IV, chapter 5 of
//! the thesis in shared/seeds/004): chosen functions call the runtime
//! (`libmantle-instr`, crate `mantle-instr-rt`) at entry and exit, with
//! less perturbation than a general instrumenter.
//!
//! Mechanism, on an ELF relocatable object (`.o`):
//! * the start of each chosen function (after `endbr64`) is overwritten
//!   with `call stub; jmp over; .long id` (11 bytes; a 32-bit id, so no
//!   256-function limit as in the paper's prototype). The stub is shared by
//!   every site whose overwritten instructions, relocations included, are
//!   the same (§5.3 "code reuse"); it calls the runtime's entry, runs the
//!   overwritten instructions and *returns* to the site (the paper jumped
//!   back, which unbalances the return predictor), using no register;
//! * instructions are decoded with iced-x86; the ELF file is read and
//!   written with `object`'s builder, so every section, symbol and
//!   relocation the rewrite does not touch is kept as it was; the moved
//!   instructions take their relocations with them ([`plan`]);
//! * exits, chosen per function ([`ExitMode`]): by default a call-through
//!   *trampoline*: the entry becomes `jmp tramp`, and the trampoline calls
//!   the runtime, then *calls* the moved instructions (which jump back into
//!   the function), then the runtime again, then returns: every call has
//!   its ret (the return predictor and a CET shadow stack stay right) and
//!   the function sees its stack exactly as the caller left it (the
//!   runtime keeps the caller's return address per thread). In objects
//!   the trampoline carries the runtime's fast paths inline (one `fs:`
//!   load, the id as an immediate, one indirect call for the hook) and
//!   calls the runtime only on its slow paths (`rewrite::inline_tramp`;
//!   issue 35: about half the cost per call). Otherwise, where
//!   every way out is a movable `ret`, each `ret` becomes a jump to an
//!   exit stub (`...; call leave; ret`), and elsewhere LOPI's lazy *return
//!   frame* (Figures 5.4-5.6): the runtime replaces the return address
//!   with a per-depth code slot;
//! * a site that cannot be patched safely is refused with a reason
//!   ([`Refusal`]); the [`Report`] lists every chosen function.
//!
//! Invariants: the input is a claim: anything but a well-formed x86-64
//! little-endian relocatable ELF is an [`Error`], never a panic; planning
//! ([`plan`]) and rewriting ([`rewrite`]) make no system call; only the
//! CLI reads and writes files. Linked executables and shared libraries:
//! [`linked`]. Functions can be chosen from a `mantle prof` session
//! ([`select::hottest`]; the CLI reads the session).
//!
//! Section groups (COMDAT: C++ inline functions, templates, vtables):
//! `object`'s builder cannot read them, so `group` validates them, hides
//! them from the builder and restores them with the output's indices; the
//! stubs and trampolines of a grouped function live in a stub section of
//! its group, so the linker keeps or discards them with the function (the
//! first object on the link line wins; the report names the group).
//!
//! Lock order: no locks.

mod group;
pub mod linked;
pub mod plan;
pub mod report;
pub mod rewrite;
pub mod select;
pub mod vregs;

pub use plan::{ExitMode, Plan};
pub use report::{Function, Outcome, Refusal, Report};
pub use select::Selection;

use object::build::elf::Builder;
use object::elf;

/// Why a file cannot be rewritten.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not an ELF file, or its tables do not parse.
    #[error("not a well-formed ELF file: {0}")]
    Elf(#[source] object::build::Error),
    /// A well-formed ELF file of a kind this version does not rewrite.
    #[error("unsupported ELF file: {0}")]
    Unsupported(String),
    /// The ELF file's contents contradict each other.
    #[error("malformed ELF file: {0}")]
    Malformed(String),
    /// The rewritten file could not be laid out.
    #[error("cannot write the rewritten file: {0}")]
    Write(#[source] object::build::Error),
}

/// Parses `data` as an x86-64 relocatable object. An object with section
/// groups or clang's address-significance table is an error here (the
/// builder cannot read them): [`plan_file`] and [`rewrite_file`] handle
/// them.
pub fn parse(data: &[u8]) -> Result<Builder<'_>, Error> {
    if !group::read(data)?.is_empty() {
        return Err(Error::Unsupported(
            "section groups: use plan_file or rewrite_file".into(),
        ));
    }
    if let std::borrow::Cow::Owned(_) = mask_addrsig(data) {
        return Err(Error::Unsupported(
            "an address-significance table (clang): use plan_file or rewrite_file".into(),
        ));
    }
    parse_masked(data)
}

/// `SHT_LLVM_ADDRSIG`: clang's list of symbols whose address is taken,
/// read by linkers for safe identical-code folding.
const SHT_LLVM_ADDRSIG: u32 = 0x6fff_4c03;

/// `data` with clang's address-significance tables turned into plain
/// bytes, which the builder reads (it refuses the type); [`parse_masked`]
/// then drops them: they list symbol indices the rewrite renumbers, and a
/// linker that finds none treats every address as significant (the safe
/// side: no folding).
fn mask_addrsig(data: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use object::read::elf::{FileHeader, SectionHeader};
    let found = || -> Option<Vec<usize>> {
        let h = elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
        let endian = h.endian().ok()?;
        let secs = h.sections(endian, data).ok()?;
        let shoff = h.e_shoff(endian) as usize;
        let size = std::mem::size_of::<elf::SectionHeader64<object::Endianness>>();
        Some(
            (1..secs.len())
                .filter(|&i| {
                    secs.section(object::SectionIndex(i))
                        .is_ok_and(|s| s.sh_type(endian) == SHT_LLVM_ADDRSIG)
                })
                // sh_type is the second word of a section header.
                .map(|i| shoff + i * size + 4)
                .collect(),
        )
    };
    let little = data.get(5) == Some(&elf::ELFDATA2LSB); // e_ident[EI_DATA]
    as_progbits(data, &found().unwrap_or_default(), !little)
}

/// `data` with the section headers whose `sh_type` field is at each of
/// `type_at` (file offsets) made `SHT_PROGBITS`, which the builder reads
/// as plain bytes; borrowed when there are none.
pub(crate) fn as_progbits<'a>(
    data: &'a [u8],
    type_at: &[usize],
    big_endian: bool,
) -> std::borrow::Cow<'a, [u8]> {
    if type_at.is_empty() {
        return std::borrow::Cow::Borrowed(data);
    }
    let t = if big_endian {
        elf::SHT_PROGBITS.to_be_bytes()
    } else {
        elf::SHT_PROGBITS.to_le_bytes()
    };
    let mut d = data.to_vec();
    for &a in type_at {
        if let Some(x) = d.get_mut(a..a + 4) {
            x.copy_from_slice(&t);
        }
    }
    std::borrow::Cow::Owned(d)
}

/// Parses `data`, whose groups (if any) [`group::Groups::mask`] hid and
/// whose address-significance tables [`mask_addrsig`] made plain.
fn parse_masked(data: &[u8]) -> Result<Builder<'_>, Error> {
    let mut b = Builder::read(data).map_err(Error::Elf)?;
    for s in b.sections.iter_mut() {
        if &*s.name == b".llvm_addrsig" {
            s.delete = true;
        }
    }
    // clang names sections from the symbols' string table (no
    // `.shstrtab` of their own): the writer needs one.
    if !b
        .sections
        .iter()
        .any(|s| matches!(s.data, object::build::elf::SectionData::SectionString))
    {
        let s = b.sections.add();
        s.name = (&b".shstrtab"[..]).into();
        s.sh_type = elf::SHT_STRTAB;
        s.sh_addralign = 1;
        s.data = object::build::elf::SectionData::SectionString;
    }
    if !b.is_64 || b.endian != object::Endianness::Little {
        return Err(Error::Unsupported("not a 64-bit little-endian file".into()));
    }
    if b.header.e_machine != elf::EM_X86_64 {
        return Err(Error::Unsupported(format!(
            "machine {} is not x86-64 ({})",
            b.header.e_machine,
            elf::EM_X86_64
        )));
    }
    match b.header.e_type {
        elf::ET_REL => {}
        elf::ET_EXEC | elf::ET_DYN => {
            return Err(Error::Unsupported(
                "a linked executable or shared library: see mantle_instr::linked".into(),
            ))
        }
        t => return Err(Error::Unsupported(format!("ELF type {t}"))),
    }
    if b.sections.iter().any(|s| s.sh_type == elf::SHT_REL) {
        return Err(Error::Unsupported(
            "REL relocations (x86-64 uses RELA)".into(),
        ));
    }
    Ok(b)
}

/// Plans the rewrite of `data` (named `input` in the report).
pub fn plan_file(
    data: &[u8],
    input: &str,
    sel: &Selection,
    first_id: u32,
    mode: ExitMode,
) -> Result<Report, Error> {
    if linked::is_linked(data) {
        return linked::plan_file(data, input, sel, first_id, mode);
    }
    let groups = group::read(data)?;
    let masked = groups.mask(data);
    let masked = mask_addrsig(&masked);
    let b = parse_masked(&masked)?;
    let p = plan_groups(&b, &groups, sel, first_id, mode);
    Ok(Report::new(input, &p))
}

/// Plans, and names the COMDAT group of each chosen function.
fn plan_groups(
    b: &Builder<'_>,
    groups: &group::Groups,
    sel: &Selection,
    first_id: u32,
    mode: ExitMode,
) -> Plan {
    let o = plan::Object::new(b);
    let chosen = plan::candidates(b, sel);
    let mut p = plan::plan(&o, &chosen, first_id, mode);
    // One function per candidate, in order (plan::plan).
    for (f, c) in p.functions.iter_mut().zip(&chosen) {
        f.comdat = groups
            .of(c.section)
            .map(|g| groups.signature(g).to_string());
    }
    p
}

/// Rewrites `data`: the new object's bytes and the report.
pub fn rewrite_file(
    data: &[u8],
    input: &str,
    sel: &Selection,
    first_id: u32,
    mode: ExitMode,
) -> Result<(Vec<u8>, Report), Error> {
    let mut groups = group::read(data)?;
    let masked = groups.mask(data);
    let masked = mask_addrsig(&masked);
    let mut b = parse_masked(&masked)?;
    let p = plan_groups(&b, &groups, sel, first_id, mode);
    let report = Report::new(input, &p);
    rewrite::apply_in_groups(&mut b, &p, &mut groups, true)?;
    let expected = groups.restore(&mut b)?;
    let mut out = Vec::with_capacity(data.len() + 4096);
    b.write(&mut out).map_err(Error::Write)?;
    group::check(&out, &expected)?;
    Ok((out, report))
}
