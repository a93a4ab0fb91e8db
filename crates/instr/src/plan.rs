//! The planner: which functions can be patched, how, and with which
//! shared stub. Pure: reads the parsed object ([`Object`]), makes no system
//! call, and is what the unit tests drive.
//!
//! A site is the first instructions of a function (after `endbr64`) that
//! cover [`PATCH_LEN`] bytes: `call rel32` to the stub, a `jmp` over the
//! 32-bit id, the id.
//! It is refused when patching it is unsafe (Paper IV §5.3 sketched the
//! first of these; mantle checks them all):
//! * a branch or a relocation or a symbol targets a byte inside it other
//!   than its first (the jump would land in the middle of the call);
//! * the function is shorter than the patch, or has no size;
//! * an overwritten instruction cannot run elsewhere: a relative branch
//!   other than jcc/jmp/call without a relocation (those are re-encoded
//!   with rel32 and a relocation), a change of rsp other than push, pop
//!   and add/sub of a constant, an undecodable byte, or a relocation that
//!   straddles instructions;
//! * a jump from inside the function to its entry;
//! * the function reads its own return address (`[rsp]` before the frame
//!   grows, `[rbp+8]` with a frame pointer): the return frame would show;
//! * the function would need a return frame and the object uses C++
//!   exceptions (`__gxx_personality_v0`): the unwinder cannot step through
//!   a return frame's code slot (balanced functions are fine: their
//!   return address is never rewritten).
//!
//! RIP-relative operands keep their relocation (a PC-relative relocation
//! moved with its field computes the same target: its addend is relative
//! to the field); a RIP-relative operand the assembler resolved inside the
//! section gets a new relocation against the section.

use crate::report::{Outcome, Refusal};
use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, OpKind, Register,
};
use object::build::elf::{Builder, SectionData, SectionId, SymbolId};
use object::build::Id;
use object::elf;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// `call rel32` (5 bytes), `jmp rel8` (2) and the function id (4 bytes).
pub const PATCH_LEN: usize = crate::rewrite::SITE_LEN;
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// The symbol a moved relocation refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RelSym {
    Sym(usize),
    /// The section symbol of this section (added if missing).
    SectionOf(usize),
}

/// A relocation of the overwritten instructions, at an offset into them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MovedReloc {
    pub offset: u64,
    pub r_type: u32,
    pub sym: RelSym,
    pub addend: i64,
}

/// A stub: the overwritten instructions (with their relocations), shared
/// by every site whose overwritten instructions are the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StubKey {
    pub code: Vec<u8>,
    pub relocs: Vec<MovedReloc>,
    /// Bytes the overwritten instructions push or reserve (D).
    pub depth: u32,
    /// Where the stub parks the resume address while they run, relative
    /// to the stack pointer at the function's entry (negative).
    pub resume_slot: i32,
    /// The function's exits are patched (no return frame).
    pub balanced: bool,
}

/// An exit stub: the instructions before a `ret`, then the runtime's
/// leave, then the `ret` (with its pop count).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExitKey {
    pub code: Vec<u8>,
    pub relocs: Vec<MovedReloc>,
    pub ret_pop: u16,
}

/// A patched `ret` (with the instructions before it).
#[derive(Debug, Clone)]
pub struct ExitSite {
    pub start: u64,
    pub covered: usize,
    pub stub: usize,
}

/// Follows the stack through the overwritten instructions, so the stub
/// can keep the address to resume at in a stack slot instead of a
/// register (a register would be clobbered: GCC's -fipa-ra lets callers
/// keep values in call-clobbered registers the callee does not touch).
#[derive(Default)]
struct StackTrack {
    /// Bytes below the entry stack pointer, before each instruction.
    heights: Vec<i64>,
    /// The current height.
    h: i64,
    /// rbp = entry rsp - this, once `mov rbp, rsp` ran.
    rbp: Option<i64>,
    /// Stack bytes written, as [from, to) relative to the entry rsp.
    writes: Vec<(i64, i64)>,
}

impl StackTrack {
    fn step(
        &mut self,
        ins: &Instruction,
        info: &iced_x86::InstructionInfo,
    ) -> Result<(), &'static str> {
        use iced_x86::{Mnemonic as M, OpAccess as A};
        // The callee's frame would overwrite the parked resume address
        // below rsp (found on Debian's libsqlite3: `push rbx; mov rbx,
        // rdi; call sqlite3Malloc` in sqlite3MallocZero's first 11 bytes).
        if matches!(
            ins.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall
        ) {
            return Err("calls a function, whose frame would overwrite the stub's stack slot");
        }
        self.heights.push(self.h);
        for m in info.used_memory() {
            if !matches!(
                m.access(),
                A::Write | A::CondWrite | A::ReadWrite | A::ReadCondWrite
            ) {
                continue;
            }
            let base = match (m.base(), m.index()) {
                (Register::RSP, Register::None) => -self.h,
                (Register::RBP, Register::None) => match self.rbp {
                    Some(r) => -r,
                    // rbp is still the caller's: its frame is above us.
                    None => continue,
                },
                (Register::RSP | Register::RBP, _) => return Err("writes the stack with an index"),
                _ => continue,
            };
            let at = base + m.displacement() as i64;
            self.writes.push((at, at + m.memory_size().size() as i64));
        }
        let writes_rsp = info
            .used_registers()
            .iter()
            .any(|u| u.register() == Register::RSP && !matches!(u.access(), A::Read | A::CondRead));
        let imm = |ins: &Instruction| {
            (ins.op_count() == 2
                && ins.op0_kind() == OpKind::Register
                && ins.op0_register() == Register::RSP
                && matches!(
                    ins.op1_kind(),
                    OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate8
                ))
            .then(|| ins.immediate(1) as i64)
        };
        match ins.mnemonic() {
            _ if ins.stack_pointer_increment() != 0 => {
                self.h -= i64::from(ins.stack_pointer_increment())
            }
            M::Sub if imm(ins).is_some() => self.h += imm(ins).unwrap_or(0),
            M::Add if imm(ins).is_some() => self.h -= imm(ins).unwrap_or(0),
            _ if writes_rsp => return Err("changes rsp in a way the stub cannot follow"),
            M::Mov
                if ins.op0_kind() == OpKind::Register
                    && ins.op0_register() == Register::RBP
                    && ins.op1_kind() == OpKind::Register
                    && ins.op1_register() == Register::RSP =>
            {
                self.rbp = Some(self.h)
            }
            _ => {}
        }
        if !(0..=1 << 20).contains(&self.h) {
            return Err("moves the stack pointer up or too far");
        }
        Ok(())
    }

    /// (D, q): the depth the instructions leave, and an 8-byte slot q
    /// (relative to the entry rsp) that no overwritten instruction writes
    /// and that is never more than the 128-byte red zone below rsp, where
    /// a signal frame could overwrite it.
    fn resume_slot(&self) -> Option<(u32, i32)> {
        let mut heights = self.heights.clone();
        heights.push(self.h);
        let lowest = heights.iter().copied().max().unwrap_or(0);
        (1..=lowest / 8 + 1)
            .map(|k| -8 * k)
            .find(|&q| {
                heights.iter().all(|&h| q >= -h - 128)
                    && self.writes.iter().all(|&(a, b)| b <= q || a >= q + 8)
            })
            .map(|q| (self.h as u32, q as i32))
    }
}

/// One patched function entry.
#[derive(Debug, Clone)]
pub struct Site {
    pub section: SectionId,
    /// Section offset of the patch (after `endbr64`).
    pub start: u64,
    /// Bytes overwritten (whole instructions, >= PATCH_LEN).
    pub covered: usize,
    pub id: u32,
    pub stub: usize,
    /// Patched exits (balanced mode); empty with return frames.
    pub exits: Vec<ExitSite>,
    /// The trampoline (index into [`Plan::trampolines`]) when the site
    /// jumps to one instead of calling a stub.
    pub tramp: Option<usize>,
}

/// The whole rewrite, ready to apply.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub sites: Vec<Site>,
    pub stubs: Vec<StubKey>,
    pub exit_stubs: Vec<ExitKey>,
    /// Call-through trampolines, one per function that has one.
    pub trampolines: Vec<Trampoline>,
    /// Some function got a return frame (its `ret` would fault on a CET
    /// shadow stack).
    pub return_frames: bool,
    /// One entry per chosen function, in symbol order.
    pub functions: Vec<crate::report::Function>,
    /// The object carries a CET (IBT/SHSTK) property that the rewrite must
    /// clear.
    pub cet: bool,
    pub mode: ExitMode,
}

/// A section's relocations by offset: (type, symbol, addend).
pub(crate) type Relocs = BTreeMap<u64, (u32, Option<SymbolId>, i64)>;

/// What the planner reads of a relocatable object.
pub struct Object<'a, 'd> {
    pub b: &'a Builder<'d>,
    /// Relocations per target section, by offset.
    relocs: HashMap<usize, Relocs>,
    /// Section offsets targeted by relocations or symbols, per section.
    targets: HashMap<usize, BTreeSet<u64>>,
    /// Near-branch targets found by decoding each executable section.
    branch_targets: HashMap<usize, BTreeSet<u64>>,
    pub uses_cxx_exceptions: bool,
}

fn is_pc_relative(t: u32) -> bool {
    matches!(
        t,
        elf::R_X86_64_PC32
            | elf::R_X86_64_PLT32
            | elf::R_X86_64_GOTPCREL
            | elf::R_X86_64_GOTPCRELX
            | elf::R_X86_64_REX_GOTPCRELX
            | elf::R_X86_64_PC64
            | elf::R_X86_64_GOTPC32
    )
}

pub(crate) fn section_bytes<'a>(b: &'a Builder<'_>, id: SectionId) -> &'a [u8] {
    match &b.sections.get(id).data {
        SectionData::Data(d) => d.as_slice(),
        _ => &[],
    }
}

impl<'a, 'd> Object<'a, 'd> {
    /// The relocations of section `sec` (builder index), by offset.
    pub(crate) fn relocs_of(&self, sec: usize) -> Option<&Relocs> {
        self.relocs.get(&sec)
    }

    /// Indexes relocations, symbol and branch targets.
    pub fn new(b: &'a Builder<'d>) -> Self {
        let mut relocs: HashMap<usize, Relocs> = HashMap::new();
        for s in b.sections.iter() {
            if let (SectionData::Relocation(rs), Some(target)) = (&s.data, s.sh_info_section) {
                let m = relocs.entry(target.index()).or_default();
                for r in rs {
                    m.insert(r.r_offset, (r.r_type, r.symbol, r.r_addend));
                }
            }
        }
        // Decode each executable section: its branch targets, and where
        // each instruction ends (to resolve PC-relative relocations).
        let mut branch_targets = HashMap::new();
        let mut ends: HashMap<usize, BTreeMap<u64, u64>> = HashMap::new();
        for s in b.sections.iter() {
            if s.sh_type == elf::SHT_PROGBITS && s.sh_flags & u64::from(elf::SHF_EXECINSTR) != 0 {
                let data = section_bytes(b, s.id());
                let rel = relocs.get(&s.id().index());
                let mut set = BTreeSet::new();
                let mut end = BTreeMap::new();
                let mut dec = Decoder::with_ip(64, data, 0, DecoderOptions::NONE);
                let mut ins = Instruction::default();
                while dec.can_decode() {
                    dec.decode_out(&mut ins);
                    if ins.is_invalid() {
                        continue;
                    }
                    end.insert(ins.ip(), ins.next_ip());
                    if is_near_branch(&ins) && !has_reloc_in(rel, ins.ip(), ins.next_ip()) {
                        set.insert(ins.near_branch_target());
                    }
                }
                branch_targets.insert(s.id().index(), set);
                ends.insert(s.id().index(), end);
            }
        }
        let mut targets: HashMap<usize, BTreeSet<u64>> = HashMap::new();
        for (&from, m) in &relocs {
            for (&off, &(r_type, sym, addend)) in m {
                let Some(sym) = sym.map(|id| b.symbols.get(id)) else {
                    continue;
                };
                let Some(sec) = sym.section else { continue };
                // The referenced byte is symbol + addend, except for a
                // PC-relative field inside an instruction, whose addend
                // is relative to the field: add the field-to-end distance.
                let mut t = sym.st_value.wrapping_add(addend as u64);
                if is_pc_relative(r_type) {
                    let next = ends.get(&from).and_then(|e| e.range(..=off).next_back());
                    if let Some((_, &next_ip)) = next.filter(|(_, &n)| n > off) {
                        t = t.wrapping_add(next_ip - off);
                    }
                }
                targets.entry(sec.index()).or_default().insert(t);
            }
        }
        for sym in b.symbols.iter() {
            if let Some(sec) = sym.section {
                if sym.st_type() != elf::STT_SECTION {
                    targets.entry(sec.index()).or_default().insert(sym.st_value);
                }
            }
        }
        let uses_cxx_exceptions = b.symbols.iter().any(|s| {
            let n: &[u8] = &s.name;
            n == b"__gxx_personality_v0" || n == b"__cxa_throw"
        });
        Object {
            b,
            relocs,
            targets,
            branch_targets,
            uses_cxx_exceptions,
        }
    }
}

fn has_reloc_in(rel: Option<&Relocs>, from: u64, to: u64) -> bool {
    rel.is_some_and(|m| m.range(from..to).next().is_some())
}

fn is_near_branch(ins: &Instruction) -> bool {
    (0..ins.op_count()).any(|i| {
        matches!(
            ins.op_kind(i),
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
        )
    })
}

/// A chosen function.
pub struct Candidate {
    pub name: String,
    pub section: SectionId,
    pub value: u64,
    pub size: u64,
}

/// Finds the functions the selection chooses: defined `STT_FUNC` symbols,
/// one per address (aliases share the first name).
pub fn candidates(b: &Builder<'_>, sel: &crate::Selection) -> Vec<Candidate> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for s in b.symbols.iter() {
        let name = String::from_utf8_lossy(&s.name).into_owned();
        let Some(section) = s.section else { continue };
        if s.st_type() != elf::STT_FUNC || !sel.matches(&name) {
            continue;
        }
        if seen.insert((section.index(), s.st_value)) {
            out.push(Candidate {
                name,
                section,
                value: s.st_value,
                size: s.st_size,
            });
        }
    }
    out
}

/// Plans the rewrite of the chosen functions, numbering the instrumented
/// ones from `first_id`.
pub fn plan(o: &Object<'_, '_>, chosen: &[Candidate], first_id: u32, mode: ExitMode) -> Plan {
    let mut plan = Plan {
        cet: crate::rewrite::has_cet(o.b),
        mode,
        ..Plan::default()
    };
    let mut stub_ids: HashMap<StubKey, usize> = HashMap::new();
    let mut exit_ids: HashMap<ExitKey, usize> = HashMap::new();
    let mut next_id = first_id;
    // What ordinary hooks must keep, for the trampolines.
    let keeps = (mode == ExitMode::Auto).then(|| crate::vregs::analyze(o));
    for c in chosen {
        let sec_name = String::from_utf8_lossy(&o.b.sections.get(c.section).name).into_owned();
        let outcome = match site(o, c, mode) {
            Err(r) => Outcome::Refused { reason: r },
            Ok(Planned {
                start,
                covered,
                entry,
            }) => {
                let id = next_id;
                next_id = next_id.wrapping_add(1);
                let mut site = Site {
                    section: c.section,
                    start,
                    covered,
                    id,
                    stub: 0,
                    exits: Vec::new(),
                    tramp: None,
                };
                let mut xmm_kept = None;
                let kind = match entry {
                    PlannedEntry::Trampoline(mut t) => {
                        if let Some(k) = keeps
                            .as_ref()
                            .and_then(|k| k.get(c.section.index(), c.value))
                        {
                            t.keep = k;
                        }
                        xmm_kept = Some([t.keep.entry, t.keep.exit]);
                        site.stub = plan.trampolines.len();
                        site.tramp = Some(site.stub);
                        plan.trampolines.push(t);
                        ExitKind::Trampoline
                    }
                    PlannedEntry::Stub(key, exit_keys) => {
                        for (start, covered, k) in exit_keys {
                            let n = exit_ids.len();
                            let stub = *exit_ids.entry(k.clone()).or_insert_with(|| {
                                plan.exit_stubs.push(k);
                                n
                            });
                            site.exits.push(ExitSite {
                                start,
                                covered,
                                stub,
                            });
                        }
                        let balanced = key.balanced;
                        let n = stub_ids.len();
                        site.stub = *stub_ids.entry(key.clone()).or_insert_with(|| {
                            plan.stubs.push(key);
                            n
                        });
                        if balanced {
                            ExitKind::PatchedRets
                        } else {
                            plan.return_frames = true;
                            ExitKind::ReturnFrame
                        }
                    }
                };
                let outcome = Outcome::Instrumented {
                    id,
                    stub: site.stub,
                    patched_bytes: covered,
                    endbr64: start != c.value,
                    exit: kind.name(),
                    patched_rets: site.exits.len(),
                    xmm_kept,
                };
                plan.sites.push(site);
                outcome
            }
        };
        plan.functions.push(crate::report::Function {
            name: c.name.clone(),
            section: sec_name,
            offset: c.value,
            size: c.size,
            comdat: None,
            outcome,
        });
    }
    plan
}

/// One function's patch: where, how many bytes, and its entry.
struct Planned {
    start: u64,
    covered: usize,
    entry: PlannedEntry,
}

enum PlannedEntry {
    /// A shared entry stub, and the patched exits (none: return frame).
    Stub(StubKey, Vec<(u64, usize, ExitKey)>),
    Trampoline(Trampoline),
}

/// How exits are instrumented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExitMode {
    /// A call-through trampoline for every function (calls and returns
    /// stay paired whatever the function's epilogues look like; the stack
    /// layout is the original's). In objects that use C++ exceptions,
    /// whose unwinder cannot step through a trampoline, patched `ret`s
    /// where possible, else refused. The default: the fastest
    /// (bench/instr/RESULTS.md).
    #[default]
    Auto,
    /// Patch the `ret`s where every exit can be patched (calls and returns
    /// stay paired), return frames elsewhere.
    PatchedRets,
    /// LOPI's return frames everywhere.
    ReturnFrames,
}

impl ExitMode {
    /// The name the CLI and the report use.
    pub fn name(self) -> &'static str {
        match self {
            ExitMode::Auto => "auto",
            ExitMode::PatchedRets => "patched-rets",
            ExitMode::ReturnFrames => "return-frames",
        }
    }
}

/// How one function's exit is instrumented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    Trampoline,
    PatchedRets,
    ReturnFrame,
}

impl ExitKind {
    /// The report's name.
    pub fn name(self) -> &'static str {
        match self {
            ExitKind::Trampoline => "trampoline",
            ExitKind::PatchedRets => "balanced",
            ExitKind::ReturnFrame => "return-frame",
        }
    }
}

/// A call-through trampoline's body: the overwritten instructions, run
/// before jumping back behind the patch.
#[derive(Debug, Clone)]
pub struct Trampoline {
    pub code: Vec<u8>,
    pub relocs: Vec<MovedReloc>,
    /// The vector registers an ordinary hook call keeps.
    pub keep: crate::vregs::Keep,
}

/// `jmp rel32` to a trampoline.
pub const TRAMP_PATCH_LEN: usize = 5;

/// Plans a trampoline entry: the instructions covering
/// [`TRAMP_PATCH_LEN`] bytes, moved. The trampoline calls the body, so
/// the body runs with the stack as the caller left it (its return address
/// is the trampoline's); no stack tracking is needed, since the body jumps
/// back instead of returning.
fn trampoline(
    o: &Object<'_, '_>,
    c: &Candidate,
    start: u64,
    end: u64,
) -> Result<(usize, Trampoline), Refusal> {
    if end - start < TRAMP_PATCH_LEN as u64 {
        return Err(Refusal::TooShort {
            size: c.size,
            need: (start - c.value) + TRAMP_PATCH_LEN as u64,
        });
    }
    let (covered, code, relocs) = relocate(o, c, start, end, TRAMP_PATCH_LEN, None)?;
    let data = section_bytes(o.b, c.section);
    let func = &data[c.value as usize..end as usize];
    // `ret imm16` would return to the trampoline with its caller's
    // arguments popped: the trampoline's own `ret` would then be wrong.
    let dec = Decoder::with_ip(64, func, c.value, DecoderOptions::NONE);
    for ins in dec {
        if ins.flow_control() == FlowControl::Return && ins.op_count() == 1 {
            return Err(Refusal::Unrelocatable {
                insn: format!("{ins}"),
                why: "pops its arguments on return; a trampoline cannot return for it",
            });
        }
    }
    Ok((
        covered,
        Trampoline {
            code,
            relocs,
            keep: crate::vregs::Keep::ALL,
        },
    ))
}

fn site(o: &Object<'_, '_>, c: &Candidate, mode: ExitMode) -> Result<Planned, Refusal> {
    // GCC's hot/cold splitting: `f.cold` is reached by a jump from f, not
    // by a call; its "return address" is f's stack.
    if c.name.ends_with(".cold") || c.name.contains(".cold.") {
        return Err(Refusal::NotAnEntry);
    }
    if c.size == 0 {
        return Err(Refusal::NoSize);
    }
    let data = section_bytes(o.b, c.section);
    let end = c
        .value
        .checked_add(c.size)
        .filter(|&e| e <= data.len() as u64);
    let Some(end) = end else {
        return Err(Refusal::OutsideSection);
    };
    let func = &data[c.value as usize..end as usize];
    let mut start = c.value;
    if func.starts_with(&ENDBR64) {
        start += 4;
    }
    // A jump from inside the function back to its entry (a loop) would
    // run the entry instrumentation again, with no call behind it.
    for ins in Decoder::with_ip(64, func, c.value, DecoderOptions::NONE) {
        let jump = matches!(
            ins.flow_control(),
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
        );
        if jump
            && is_near_branch(&ins)
            && (ins.near_branch_target() == c.value || ins.near_branch_target() == start)
        {
            return Err(Refusal::BranchTarget {
                offset: ins.near_branch_target() - c.value,
            });
        }
    }
    let reads_ra = || match reads_return_address(func, c.value) {
        Some(off) => Err(Refusal::ReadsReturnAddress {
            offset: off - c.value,
        }),
        None => Ok(()),
    };
    if mode == ExitMode::Auto {
        let (covered, t) = trampoline(o, c, start, end)?;
        not_targeted(o, c, start, covered)?;
        // Exceptions cross trampolines (the runtime uninstalls them for
        // the unwinder, libmantle-instr's unwind.rs), but a call moved
        // into the trampoline's body would return into code no FDE or
        // LSDA covers: refused in objects that use exceptions.
        if o.uses_cxx_exceptions && moves_a_call(o, c, start, covered) {
            return Err(Refusal::CxxExceptions);
        }
        // The body's return address is the trampoline's.
        reads_ra()?;
        return Ok(Planned {
            start,
            covered,
            entry: PlannedEntry::Trampoline(t),
        });
    }
    if end - start < PATCH_LEN as u64 {
        return Err(Refusal::TooShort {
            size: c.size,
            need: (start - c.value) + PATCH_LEN as u64,
        });
    }
    let mut stack = StackTrack::default();
    let (covered, code, relocs) = relocate(o, c, start, end, PATCH_LEN, Some(&mut stack))?;
    let mut key = StubKey {
        code,
        relocs,
        depth: 0,
        resume_slot: 0,
        balanced: false,
    };
    (key.depth, key.resume_slot) = stack.resume_slot().ok_or(Refusal::Unrelocatable {
        insn: String::new(),
        why: "no stack slot for the resume address",
    })?;
    not_targeted(o, c, start, covered)?;
    let exits = match mode {
        ExitMode::Auto | ExitMode::PatchedRets => balanced_exits(o, c, (start, covered), end),
        ExitMode::ReturnFrames => None,
    };
    // A balanced function's return address is never rewritten: the
    // unwinder steps through it, and it may read its return address.
    if exits.is_none() && o.uses_cxx_exceptions {
        return Err(Refusal::CxxExceptions);
    }
    if exits.is_none() {
        reads_ra()?;
    }
    key.balanced = exits.is_some();
    Ok(Planned {
        start,
        covered,
        entry: PlannedEntry::Stub(key, exits.unwrap_or_default()),
    })
}

/// Whether the `covered` bytes from `start` hold a call.
fn moves_a_call(o: &Object<'_, '_>, c: &Candidate, start: u64, covered: usize) -> bool {
    let data = section_bytes(o.b, c.section);
    let (from, to) = (start as usize, start as usize + covered);
    let Some(code) = data.get(from..to) else {
        return true;
    };
    Decoder::with_ip(64, code, start, DecoderOptions::NONE)
        .into_iter()
        .any(|i| {
            matches!(
                i.flow_control(),
                FlowControl::Call | FlowControl::IndirectCall
            )
        })
}

/// Nothing may jump into the patched bytes except at their start.
fn not_targeted(
    o: &Object<'_, '_>,
    c: &Candidate,
    start: u64,
    covered: usize,
) -> Result<(), Refusal> {
    match targeted_inside(o, c.section, start, covered) {
        Some(t) => Err(Refusal::BranchTarget {
            offset: t - c.value,
        }),
        None => Ok(()),
    }
}

/// A byte strictly inside [start, start + len) that a branch, relocation
/// or symbol targets.
fn targeted_inside(o: &Object<'_, '_>, sec: SectionId, start: u64, len: usize) -> Option<u64> {
    let inside = start + 1..start + len as u64;
    let targeted =
        |set: Option<&BTreeSet<u64>>| set.and_then(|s| s.range(inside.clone()).next().copied());
    targeted(o.branch_targets.get(&sec.index())).or(targeted(o.targets.get(&sec.index())))
}

/// Decodes whole instructions from `start` until they cover `min_len`
/// bytes and makes them runnable elsewhere: (bytes covered, code,
/// relocations relative to the code). Follows the stack if asked.
fn relocate(
    o: &Object<'_, '_>,
    c: &Candidate,
    start: u64,
    end: u64,
    min_len: usize,
    mut stack: Option<&mut StackTrack>,
) -> Result<(usize, Vec<u8>, Vec<MovedReloc>), Refusal> {
    let data = section_bytes(o.b, c.section);
    let rel = o.relocs.get(&c.section.index());
    let mut dec = Decoder::with_ip(
        64,
        &data[start as usize..end as usize],
        start,
        DecoderOptions::NONE,
    );
    let mut covered = 0usize;
    let (mut code, mut relocs) = (Vec::new(), Vec::new());
    let mut info = InstructionInfoFactory::new();
    while covered < min_len {
        if !dec.can_decode() {
            return Err(Refusal::TooShort {
                size: c.size,
                need: (start - c.value) + min_len as u64,
            });
        }
        let ins = dec.decode();
        if ins.is_invalid() {
            return Err(Refusal::Undecodable {
                offset: ins.ip() - c.value,
            });
        }
        let text = format!("{ins}");
        let unreloc = |why: &'static str| Refusal::Unrelocatable {
            insn: text.clone(),
            why,
        };
        if let Some(st) = stack.as_deref_mut() {
            st.step(&ins, info.info(&ins)).map_err(unreloc)?;
        }
        let at = code.len();
        let mut bytes = data[ins.ip() as usize..ins.next_ip() as usize].to_vec();
        let offs = dec.get_constant_offsets(&ins);
        let mut relocated_field = None;
        if let Some(m) = rel {
            for (&off, &(r_type, sym, addend)) in m.range(ins.ip()..ins.next_ip()) {
                let Some(sym) = sym else {
                    return Err(unreloc("relocation without a symbol"));
                };
                let width =
                    reloc_width(r_type).ok_or_else(|| unreloc("relocation of an unknown type"))?;
                if off + width > ins.next_ip() {
                    return Err(unreloc("relocation crosses the instruction's end"));
                }
                relocated_field = Some(off - ins.ip());
                relocs.push(MovedReloc {
                    offset: (at as u64) + (off - ins.ip()),
                    r_type,
                    sym: RelSym::Sym(sym.index()),
                    addend,
                });
            }
            // A relocation that starts before this instruction and reaches in.
            if let Some((&off, &(t, ..))) = m.range(..ins.ip()).next_back() {
                if off + reloc_width(t).unwrap_or(8) > ins.ip() && off >= c.value {
                    return Err(unreloc("relocation crosses the instruction's start"));
                }
            }
        }
        if is_near_branch(&ins) && relocated_field.is_none() {
            // Resolved by the assembler inside the section: re-encode it
            // with a 32-bit displacement and a relocation to its target.
            let (op, rel_at): (Vec<u8>, u64) = match bytes[0] {
                0x70..=0x7f if bytes.len() == 2 => (vec![0x0f, bytes[0] + 0x10], 2),
                0x0f if bytes.len() == 6 && (0x80..=0x8f).contains(&bytes[1]) => {
                    (bytes[..2].to_vec(), 2)
                }
                0xeb if bytes.len() == 2 => (vec![0xe9], 1),
                0xe9 | 0xe8 if bytes.len() == 5 => (vec![bytes[0]], 1),
                _ => return Err(unreloc("relative branch of a form that cannot be moved")),
            };
            let mut enc = op;
            enc.extend_from_slice(&[0; 4]);
            relocs.push(MovedReloc {
                offset: (code.len() as u64) + rel_at,
                r_type: elf::R_X86_64_PC32,
                sym: RelSym::SectionOf(c.section.index()),
                addend: ins.near_branch_target() as i64 - 4,
            });
            code.extend_from_slice(&enc);
            covered += ins.len();
            continue;
        }
        if ins.is_ip_rel_memory_operand() && relocated_field.is_none() {
            // Resolved inside the section: add a relocation against it.
            if !offs.has_displacement() || offs.displacement_size() != 4 {
                return Err(unreloc(
                    "RIP-relative operand without a 32-bit displacement",
                ));
            }
            let d = offs.displacement_offset() as u64;
            let target = ins.ip_rel_memory_address();
            let tail = ins.len() as u64 - d;
            bytes[d as usize..d as usize + 4].fill(0);
            relocs.push(MovedReloc {
                offset: at as u64 + d,
                r_type: elf::R_X86_64_PC32,
                sym: RelSym::SectionOf(c.section.index()),
                addend: target as i64 - tail as i64,
            });
        }
        code.extend_from_slice(&bytes);
        covered += ins.len();
    }
    Ok((covered, code, relocs))
}

/// `jmp rel32` to the exit stub.
pub const EXIT_JMP_LEN: usize = 5;

/// The exits of a function whose every exit is a `ret` that can be
/// patched: for each, (start, bytes covered, stub key). None when the
/// function must keep the return frame: a `ret` whose window (the `ret`
/// and the instructions before it, >= 5 bytes) is a branch target or not
/// relocatable, or any other way out (a jump out of the function, an
/// indirect jump, which may be a tail call or a switch).
fn balanced_exits(
    o: &Object<'_, '_>,
    c: &Candidate,
    entry: (u64, usize),
    end: u64,
) -> Option<Vec<(u64, usize, ExitKey)>> {
    let data = section_bytes(o.b, c.section);
    let rel = o.relocs.get(&c.section.index());
    let mut dec = Decoder::with_ip(
        64,
        &data[c.value as usize..end as usize],
        c.value,
        DecoderOptions::NONE,
    );
    let mut starts: Vec<u64> = Vec::new();
    let mut rets = Vec::new();
    for ins in &mut dec {
        if ins.is_invalid() {
            return None;
        }
        starts.push(ins.ip());
        match ins.flow_control() {
            FlowControl::Return => {
                if ins.mnemonic() != iced_x86::Mnemonic::Ret {
                    return None;
                }
                rets.push(ins);
            }
            FlowControl::IndirectBranch => return None,
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                let t = ins.near_branch_target();
                if has_reloc_in(rel, ins.ip(), ins.next_ip()) || t < c.value || t >= end {
                    return None;
                }
            }
            _ => {}
        }
    }
    let entry_end = entry.0 + entry.1 as u64;
    let mut out: Vec<(u64, usize, ExitKey)> = Vec::new();
    for r in rets {
        // The shortest run of whole instructions ending with this ret.
        let i = starts.iter().position(|&s| s == r.ip())?;
        let j = (0..=i)
            .rev()
            .find(|&j| r.next_ip() - starts[j] >= EXIT_JMP_LEN as u64)?;
        let w = starts[j];
        let len = (r.next_ip() - w) as usize;
        let prev_end = out.last().map_or(entry_end, |e| e.0 + e.1 as u64);
        if w < prev_end.max(entry_end) || targeted_inside(o, c.section, w, len).is_some() {
            return None;
        }
        // Relocate all but the ret; the stub adds its own.
        let body = len - r.len();
        let (code, relocs) = if body == 0 {
            (Vec::new(), Vec::new())
        } else {
            let (n, code, relocs) = relocate(o, c, w, r.ip(), body, None).ok()?;
            if n != body {
                return None;
            }
            (code, relocs)
        };
        let pop = if r.op_count() == 1 {
            r.immediate16()
        } else {
            0
        };
        out.push((
            w,
            len,
            ExitKey {
                code,
                relocs,
                ret_pop: pop,
            },
        ));
    }
    Some(out)
}

/// Bytes a relocation of this type writes.
fn reloc_width(t: u32) -> Option<u64> {
    Some(match t {
        elf::R_X86_64_64 | elf::R_X86_64_PC64 | elf::R_X86_64_GOTOFF64 => 8,
        elf::R_X86_64_PC32
        | elf::R_X86_64_PLT32
        | elf::R_X86_64_32
        | elf::R_X86_64_32S
        | elf::R_X86_64_GOTPCREL
        | elf::R_X86_64_GOTPCRELX
        | elf::R_X86_64_REX_GOTPCRELX
        | elf::R_X86_64_GOTPC32
        | elf::R_X86_64_TLSGD
        | elf::R_X86_64_TLSLD
        | elf::R_X86_64_DTPOFF32
        | elf::R_X86_64_GOTTPOFF
        | elf::R_X86_64_TPOFF32 => 4,
        elf::R_X86_64_16 | elf::R_X86_64_PC16 => 2,
        elf::R_X86_64_8 | elf::R_X86_64_PC8 => 1,
        _ => return None,
    })
}

/// The section offset of an instruction that reads the function's return
/// address, if one is found: `[rsp + h]` where h is the bytes pushed or
/// reserved since entry, on the straight line from the entry to the first
/// branch; `[rbp + 8]`-like once rbp was set from rsp, anywhere.
/// A heuristic (no control-flow recovery): it finds what compilers emit
/// for `__builtin_return_address(0)`, not every way to read the slot.
fn reads_return_address(func: &[u8], base: u64) -> Option<u64> {
    let mut dec = Decoder::with_ip(64, func, base, DecoderOptions::NONE);
    let mut height: Option<i64> = Some(0);
    let mut rbp_at: Option<i64> = None;
    let mut ins = Instruction::default();
    while dec.can_decode() {
        dec.decode_out(&mut ins);
        if ins.is_invalid() {
            return None;
        }
        for i in 0..ins.op_count() {
            if ins.op_kind(i) != OpKind::Memory || ins.memory_index() != Register::None {
                continue;
            }
            let disp = ins.memory_displacement64() as i64;
            let hit = match ins.memory_base() {
                Register::RSP => height == Some(disp),
                Register::RBP => rbp_at == Some(disp),
                _ => false,
            };
            if hit {
                return Some(ins.ip());
            }
        }
        if let Some(h) = height {
            let mut h = h - i64::from(ins.stack_pointer_increment());
            let rsp_dst = ins.op_count() == 2
                && ins.op0_kind() == OpKind::Register
                && ins.op0_register() == Register::RSP;
            if rsp_dst && ins.op1_kind() != OpKind::Register {
                match ins.mnemonic() {
                    iced_x86::Mnemonic::Sub => h += ins.immediate(1) as i64,
                    iced_x86::Mnemonic::Add => h -= ins.immediate(1) as i64,
                    _ => {}
                }
            }
            if ins.mnemonic() == iced_x86::Mnemonic::Mov
                && ins.op0_kind() == OpKind::Register
                && ins.op0_register() == Register::RBP
                && ins.op1_kind() == OpKind::Register
                && ins.op1_register() == Register::RSP
            {
                rbp_at = Some(h);
            }
            height = Some(h);
            if ins.flow_control() != FlowControl::Next {
                height = None;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn track(code: &[u8]) -> (Result<(), &'static str>, StackTrack) {
        let mut t = StackTrack::default();
        let mut info = InstructionInfoFactory::new();
        let mut dec = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
        while dec.can_decode() {
            let ins = dec.decode();
            if let Err(e) = t.step(&ins, info.info(&ins)) {
                return (Err(e), t);
            }
        }
        (Ok(()), t)
    }

    #[test]
    fn stack_tracking() {
        // push rbp; mov rbp, rsp; sub rsp, 0x20
        let (r, t) = track(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20]);
        assert!(r.is_ok());
        assert_eq!((t.h, t.rbp), (40, Some(8)));
        assert_eq!(t.resume_slot(), Some((40, -16)));
        // and rsp, -16
        let (r, _) = track(&[0x48, 0x83, 0xe4, 0xf0]);
        assert!(r.is_err(), "{r:?}");
        // mov [rsp-8], rdi then push rbx: the slot must avoid both writes.
        let (r, t) = track(&[0x48, 0x89, 0x7c, 0x24, 0xf8, 0x53]);
        assert!(r.is_ok());
        assert_eq!(t.resume_slot(), Some((8, -16)));
        // sub rsp, 0x1000 first: the slot stays within the red zone of the
        // entry rsp, above the final rsp.
        let (_, t) = track(&[0x48, 0x81, 0xec, 0x00, 0x10, 0x00, 0x00]);
        assert_eq!(t.resume_slot(), Some((0x1000, -8)));
    }
}
