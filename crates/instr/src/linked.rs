//! Rewriting linked x86-64 ELF files: executables (PIE and non-PIE) and
//! shared libraries. The output is a file of the same kind that runs as
//! before, its chosen functions calling libmantle-instr at entry and exit.
//!
//! Mechanism (after E9Patch, Duck et al., PLDI 2020: rewrite in place,
//! no control-flow recovery, new code in new segments):
//! * planning reuses the object planner ([`crate::plan`]) unchanged: the
//!   file is read with `object`'s builder, symbol values are made
//!   section-relative and static relocations dropped (in a linked file
//!   every operand is resolved), so a site is the same 11-byte
//!   `call stub; jmp over; .long id` as in an object, refused for the
//!   same reasons (a branch target found by decoding every executable
//!   section linearly, a function shorter than the patch, an instruction
//!   that cannot move, ...). The program's entry point is refused too;
//! * the object rewriter ([`crate::rewrite::apply`]) then patches the
//!   builder as it patches an object: a stub section and the sites, with
//!   relocations. This module places that code in a new R+X PT_LOAD behind
//!   the file's last segment and resolves the relocations to final
//!   addresses (S + A - P): a small static link (`applied`, `emit`),
//!   so linked files get whatever sites and stubs objects get;
//! * the runtime is reached without LD_PRELOAD and without code that runs
//!   before `main`: the dynamic table is copied into a new R+W segment
//!   with a DT_NEEDED on libmantle-instr (by absolute path, as given),
//!   and one undefined dynamic symbol per runtime routine the stubs name,
//!   with an R_X86_64_GLOB_DAT relocation, lets ld.so fill a slot that a
//!   PLT-like thunk (`jmp [rip+slot]`) jumps through, as it fills a GOT.
//!   Why not an init routine or LD_PRELOAD: either needs code that finds
//!   the runtime before the first instrumented call (constructors of
//!   other libraries run first) and a dlopen()ed library would need it
//!   again; the loader's own binding has neither problem.
//!
//! Invariants: the input is a claim: every offset is checked (`image`),
//! anything else than a well-formed x86-64 little-endian ET_EXEC/ET_DYN
//! with a dynamic table is an [`Error`], never a panic. The original bytes
//! keep their offsets and addresses (only sites, exits, e_phoff/e_phnum,
//! the moved tables' section headers and the CET property change), so
//! everything not chosen runs as linked. Pure: no system calls.
//!
//! Lock order: no locks.

mod applied;
mod emit;
mod image;

pub use image::is_linked;

use crate::plan::{self, ExitMode, Plan};
use crate::report::{Function, Outcome, Refusal, Report};
use crate::{Error, Selection};
use emit::Sections;
use image::Image;
use object::build::elf::{Builder, SectionData};
use object::build::Id;
use object::elf;

/// The runtime's shared library name when none is given: found through
/// the loader's search path (LD_LIBRARY_PATH, ld.so.cache).
pub const DEFAULT_RUNTIME: &str = "libmantle_instr_rt.so";

/// Libraries the runtime itself calls into (`ldd libmantle_instr_rt.so`):
/// instrumented, they would enter the runtime from inside the runtime.
const RUNTIME_DEPENDS_ON: &[&[u8]] = &[
    b"libc.so.6",
    b"libgcc_s.so.1",
    b"ld-linux-x86-64.so.2",
    b"libmantle_instr_rt.so",
];

/// Plans the rewrite of the linked file `img`: the plan and where the
/// builder's sections lie.
fn plan_image<'d>(
    img: &Image<'d>,
    sel: &Selection,
    first_id: u32,
    mode: ExitMode,
) -> Result<(Builder<'d>, Plan, Sections), Error> {
    if let Some(name) = img.soname().filter(|n| RUNTIME_DEPENDS_ON.contains(n)) {
        return Err(Error::Unsupported(format!(
            "{} is used by libmantle-instr itself: instrumented, it would call the runtime from inside the runtime",
            String::from_utf8_lossy(name)
        )));
    }
    let mut b = Builder::read(img.data).map_err(Error::Elf)?;
    // --emit-relocs leaves the static relocations: they are already
    // applied, and the planner must see resolved operands as such.
    for s in b.sections.iter_mut() {
        if let SectionData::Relocation(v) = &mut s.data {
            v.clear();
        }
    }
    let secs: Sections = b
        .sections
        .iter()
        .map(|s| (s.id().index(), (s.sh_addr, s.sh_offset)))
        .collect();
    let defines_functions = |b: &Builder<'_>| {
        b.symbols
            .iter()
            .any(|s| s.section.is_some() && s.st_type() == elf::STT_FUNC)
    };
    if !defines_functions(&b) {
        // Stripped: the exported functions are what is left.
        let dynamic: Vec<_> = b
            .dynamic_symbols
            .iter()
            .filter(|s| s.section.is_some())
            .map(|s| (s.name.clone(), s.section, s.st_info, s.st_value, s.st_size))
            .collect();
        for (name, section, info, value, size) in dynamic {
            let s = b.symbols.add();
            (s.name, s.section, s.st_info) = (name, section, info);
            (s.st_value, s.st_size) = (value, size);
        }
    }
    // The planner works in section offsets, as in an object.
    for s in b.symbols.iter_mut() {
        if let Some(&(addr, _)) = s.section.and_then(|sec| secs.get(&sec.index())) {
            s.st_value = s.st_value.wrapping_sub(addr);
        }
    }
    // The object rewriter adds its relocations beside the symbol table;
    // a stripped file has none (it is never written: any will do).
    if !b.sections.iter().any(|s| s.sh_type == elf::SHT_SYMTAB) {
        let s = b.sections.add();
        s.sh_type = elf::SHT_SYMTAB;
        s.data = SectionData::Symbol;
    }
    let mut o = plan::Object::new(&b);
    o.uses_cxx_exceptions |= b.dynamic_symbols.iter().any(|s| {
        let n: &[u8] = &s.name;
        n == b"__gxx_personality_v0" || n == b"__cxa_throw"
    });
    let mut chosen = plan::candidates(&b, sel);
    // One function, several names (GCC's `f.localalias` before `f` in a
    // shared library): the report and map say the exported one.
    let mut exported = std::collections::HashMap::new();
    for s in b.symbols.iter() {
        if let (Some(sec), elf::STB_GLOBAL | elf::STB_WEAK) = (s.section, s.st_bind()) {
            if s.st_type() == elf::STT_FUNC {
                exported
                    .entry((sec.index(), s.st_value))
                    .or_insert_with(|| String::from_utf8_lossy(&s.name).into_owned());
            }
        }
    }
    for c in &mut chosen {
        if let Some(n) = exported.get(&(c.section.index(), c.value)) {
            c.name.clone_from(n);
        }
    }
    // e_entry is entered by the kernel (a shared library may have one
    // too, e.g. libc.so run as a program).
    let is_entry = |c: &plan::Candidate| {
        img.e_entry != 0
            && secs
                .get(&c.section.index())
                .is_some_and(|&(addr, _)| addr.wrapping_add(c.value) == img.e_entry)
    };
    let (entry, rest): (Vec<_>, Vec<_>) = chosen.into_iter().partition(|c| is_entry(c));
    let mut p = plan::plan(&o, &rest, first_id, mode);
    drop(o);
    for c in entry {
        let at = p
            .functions
            .iter()
            .position(|f| f.offset > c.value)
            .unwrap_or(p.functions.len());
        p.functions.insert(
            at,
            Function {
                name: c.name,
                section: String::from_utf8_lossy(&b.sections.get(c.section).name).into_owned(),
                offset: c.value,
                size: c.size,
                comdat: None,
                outcome: Outcome::Refused {
                    reason: Refusal::ProgramEntry,
                },
            },
        );
    }
    Ok((b, p, secs))
}

/// Plans the rewrite of a linked file (named `input` in the report).
pub fn plan_file(
    data: &[u8],
    input: &str,
    sel: &Selection,
    first_id: u32,
    mode: ExitMode,
) -> Result<Report, Error> {
    let img = Image::parse(data)?;
    let (_, p, _) = plan_image(&img, sel, first_id, mode)?;
    Ok(Report::new(input, &p))
}

/// Rewrites a linked file: the new file's bytes and the report. `runtime`
/// is the name ld.so loads libmantle-instr by (an absolute path, or a
/// name it searches for, e.g. [`DEFAULT_RUNTIME`]).
pub fn rewrite_file(
    data: &[u8],
    input: &str,
    sel: &Selection,
    first_id: u32,
    mode: ExitMode,
    runtime: &str,
) -> Result<(Vec<u8>, Report), Error> {
    if runtime.is_empty() || runtime.contains('\0') {
        return Err(Error::Unsupported(format!("runtime name {runtime:?}")));
    }
    let img = Image::parse(data)?;
    let (mut b, p, secs) = plan_image(&img, sel, first_id, mode)?;
    let report = Report::new(input, &p);
    if p.sites.is_empty() {
        // Nothing to call the runtime: the file as it was, without a
        // dependency on it.
        return Ok((data.to_vec(), report));
    }
    // The object rewriter makes the stubs and patches the sites in the
    // builder, relocations and all; the linked file places and resolves
    // them.
    let cet = crate::rewrite::has_cet(&b);
    // A file that throws C++ exceptions needs the runtime's unwinder
    // entry points (libmantle-instr's unwind.rs) ahead of libgcc_s's and
    // libstdc++'s, so the runtime's DT_NEEDED goes first; otherwise last,
    // so it interposes on nothing.
    let first = b.dynamic_symbols.iter().any(|s| {
        let n: &[u8] = &s.name;
        n == b"__gxx_personality_v0" || n == b"__cxa_throw" || n == b"_Unwind_Resume"
    });
    crate::rewrite::apply(&mut b, &p)?;
    let ap = applied::collect(&b, &secs, cet)?;
    let out = emit::emit(&img, &ap, &secs, runtime.as_bytes(), first)?;
    Ok((out, report))
}
