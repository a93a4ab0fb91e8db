//! Applies a [`Plan`] to the parsed object: a new executable section
//! `.text.mantle_instr` with the stubs and its relocations, the patched
//! entries, their moved relocations, and the CET property cleared.
//! Functions in a COMDAT section group get their stubs in a section
//! `.text.mantle_instr.<signature>` of that group (`crate::group`).
//! Pure (builds bytes in memory).

use crate::group::Groups;
use crate::plan::{section_bytes, Plan, RelSym};
use object::build::elf::{Builder, Relocation, SectionData, SectionId, SymbolId};
use object::build::Id;
use object::elf;
use std::collections::{BTreeMap, HashMap};

/// The entry routine of libmantle-instr every return-frame stub calls.
pub const ENTER_SYMBOL: &[u8] = b"__mantle_instr_enter";
/// The entry routine of balanced functions (no return address rewrite).
pub const ENTER_B_SYMBOL: &[u8] = b"__mantle_instr_enter_b";
/// The exit routine balanced functions' exit stubs call.
pub const LEAVE_B_SYMBOL: &[u8] = b"__mantle_instr_leave_b";
/// The entry and exit routines of call-through trampolines.
pub const ENTER_T_SYMBOL: &[u8] = b"__mantle_instr_tramp_enter";
pub const LEAVE_T_SYMBOL: &[u8] = b"__mantle_instr_tramp_leave";

/// A call-through trampoline (libmantle-instr's `__mantle_instr_tramp_enter`
/// documents the protocol), then its body:
///
/// ```text
///  0 call __mantle_instr_tramp_enter ; R1 = 5
///  5 jmp short 13 ; 7 .long id
/// 11 .byte keep_entry, keep_exit    ; xmm registers an ordinary hook keeps
/// 13 lea rsp, [rsp + 8]
/// 18 call body                      ; R2 = 23 = R1 + TRAMP_RET_OFFSET (18)
/// 23 lea rsp, [rsp - 8]
/// 28 call __mantle_instr_tramp_leave ; R3 = 33
/// 33 ret
/// 34 body: <overwritten instructions> ; jmp function + patch
/// ```
///
/// The counts ([`crate::vregs`]) are read by the runtime at R1 + 6 and
/// R3 - 21; the routines' names changed with this layout, so an object
/// rewritten for the older one does not link with this runtime.
const TRAMP_HEAD: [u8; 34] = [
    0xe8, 0, 0, 0, 0, // call enter_t
    0xeb, 0x06, 0, 0, 0, 0, 16, 16, // jmp short over the id and counts
    0x48, 0x8d, 0x64, 0x24, 0x08, // lea rsp, [rsp + 8]
    0xe8, 0, 0, 0, 0, // call body
    0x48, 0x8d, 0x64, 0x24, 0xf8, // lea rsp, [rsp - 8]
    0xe8, 0, 0, 0, 0, // call leave_t
    0xc3,
];
const TRAMP_ENTER_AT: u64 = 1;
const TRAMP_ID_AT: usize = 7;
const TRAMP_KEEP_AT: usize = 11;
const TRAMP_BODY_CALL_AT: u64 = 19;
const TRAMP_LEAVE_AT: u64 = 29;
// The runtime finds R2 from R1 (its TRAMP_RET_OFFSET), the entry count at
// R1 + 6 and the exit count at R3 - 21.
const _: () = assert!(TRAMP_BODY_CALL_AT + 4 - (TRAMP_ENTER_AT + 4) == 18);
const _: () = assert!(TRAMP_KEEP_AT as u64 == TRAMP_ENTER_AT + 4 + 6);
const _: () = assert!(TRAMP_LEAVE_AT + 4 - (TRAMP_KEEP_AT as u64 + 1) == 21);
/// A relocation an inline trampoline needs, at a byte offset of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InlineRel {
    /// `mov rcx, [rip + __mantle_instr_xs@GOTTPOFF]` (initial-exec TLS).
    XsTls,
    /// `mov rax, [rip + __mantle_instr_enter_fn@GOTPCREL]` (resp. leave).
    EnterFn,
    LeaveFn,
    /// `mov rax, [rip + __mantle_instr_on@GOTPCREL]`.
    On,
    /// The out-of-line routines of the slow paths.
    EnterT,
    LeaveT,
    /// `call body`.
    Body,
}

/// The per-thread trampoline stack's TLS pointer and the hook routines
/// the inline fast paths call (libmantle-instr).
pub const XS_SYMBOL: &[u8] = b"__mantle_instr_xs";
pub const ENTER_FN_SYMBOL: &[u8] = b"__mantle_instr_enter_fn";
pub const LEAVE_FN_SYMBOL: &[u8] = b"__mantle_instr_leave_fn";
/// A byte of libmantle-instr, nonzero when an entry has anything to do
/// (a hook, the tracer, or the first entry that reads the environment):
/// zero, an inline trampoline jumps straight to the function's body.
pub const ON_SYMBOL: &[u8] = b"__mantle_instr_on";

/// An inline call-through trampoline (objects; issue 35): the fast paths
/// of libmantle-instr's `__mantle_instr_tramp_enter` and `_leave` written
/// into the trampoline itself, so the common entry and exit make no call
/// into the runtime but the hook's (one indirect call through
/// `__mantle_instr_enter_fn`, which is a `ret` when nothing is to run),
/// reach the thread's trampoline stack through one `fs:` load, and take
/// the id and the vector-register count as immediates. Anything else (the
/// thread's first trampoline, a full stack, frames skipped by longjmp, a
/// tail call, a claim left by a signal handler, a frame that is not on
/// top at exit) takes the slow path: the out-of-line trampoline, whose
/// bytes (`TRAMP_HEAD`: `call enter_t ; jmp short ; id ; counts ; lea ;
/// call body`, R2 = R1 + 18) sit unchanged between the two fast paths,
/// so the runtime reads them as before, and the exit count is laid 21
/// bytes before the slow exit's return address (R3). Same protocol as the
/// runtime's: an entry is claimed (sp = -1) before the length counts it
/// and filled after; at exit it is read, left claimed, then uncounted.
///
/// ```text
/// push rax ; mov rax, [rip + on@GOTPCREL] ; cmp byte [rax], 0 ; jne 1f
/// pop rax ; jmp body                      ; nothing to do: not even a frame
/// 1: push rcx, rdx, rsi, rdi              ; E = rsp + 40, X = [E]
/// mov rcx, [rip + xs@GOTTPOFF] ; mov rcx, fs:[rcx] ; test ; jz SLOW_E
/// mov rsi, [rcx] ; test rsi, rsi ; jz 1f  ; len
/// cmp [rcx + 32*len - 16], E ; jbe SLOW_E ; the top frame is not above
/// 1: cmp rsi, [rcx + 8] ; jae SLOW_E      ; full
/// claim entry len (sp = -1), len + 1, fill {X, R2, id}, sp = E
/// mov rdi, keep_entry << 32 | id ; call [enter_fn] ; pop ... ; jmp BC
/// SLOW_E: pop ... ; call enter_t ; jmp short BC ; id ; counts
/// BC: lea rsp, [rsp + 8] ; call body
/// R2: lea rsp, [rsp - 8] ; push ... ; xs as above ; jz SLOW_X
/// top = [rcx + 32*len - 16] ; len = 0 or top.sp != E: SLOW_X
/// [E] = top.X ; top.sp = -1 ; len - 1
/// mov rdi, keep_exit << 32 | id ; call [leave_fn] ; pop ... ; ret
/// .byte keep_exit ; int3 x 10 ; SLOW_X: pop ... ; call leave_t ; ret
/// body: ...
/// ```
fn inline_tramp(id: u32, keep: crate::vregs::Keep) -> (Vec<u8>, Vec<(u64, InlineRel)>) {
    const PUSH: [u8; 5] = [0x50, 0x51, 0x52, 0x56, 0x57];
    const POP: [u8; 5] = [0x5f, 0x5e, 0x5a, 0x59, 0x58];
    let mut c: Vec<u8> = Vec::with_capacity(256);
    let mut rel = Vec::new();
    // jcc rel32 to fix later: (offset of the rel32, label)
    let mut fix: Vec<(usize, u8)> = Vec::new();
    let xs = |c: &mut Vec<u8>, rel: &mut Vec<(u64, InlineRel)>| {
        c.extend_from_slice(&[0x48, 0x8b, 0x0d]);
        rel.push((c.len() as u64, InlineRel::XsTls));
        c.extend_from_slice(&[0, 0, 0, 0]);
        c.extend_from_slice(&[0x64, 0x48, 0x8b, 0x09]); // mov rcx, fs:[rcx]
        c.extend_from_slice(&[0x48, 0x85, 0xc9]); // test rcx, rcx
    };
    let jcc = |c: &mut Vec<u8>, fix: &mut Vec<(usize, u8)>, op: u8, label: u8| {
        c.extend_from_slice(&[0x0f, op]);
        fix.push((c.len(), label));
        c.extend_from_slice(&[0, 0, 0, 0]);
    };
    const SLOW_E: u8 = 0;
    const SLOW_X: u8 = 1;
    const BODY: u8 = 2;
    let hook = |c: &mut Vec<u8>, rel: &mut Vec<(u64, InlineRel)>, keep: u8, r: InlineRel| {
        c.extend_from_slice(&[0x48, 0xbf]); // mov rdi, imm64
        c.extend_from_slice(&((u64::from(keep) << 32) | u64::from(id)).to_le_bytes());
        c.extend_from_slice(&[0x48, 0x8b, 0x05]); // mov rax, [rip + fn@GOTPCREL]
        rel.push((c.len() as u64, r));
        c.extend_from_slice(&[0, 0, 0, 0]);
        c.extend_from_slice(&[0xff, 0x10]); // call [rax]
        c.extend_from_slice(&POP);
    };

    // Entry: with nothing to do (`__mantle_instr_on` zero: no hook, no
    // tracer), straight to the body, which then returns to the caller
    // itself: the cost of the instrumentation is this test and two jumps
    // (issue 35: "with no hooks the entry and exit should cost close to
    // nothing"). A frame entered so has no exit; frames entered before
    // the hooks went away still leave through the fast exit below.
    c.push(PUSH[0]);
    c.extend_from_slice(&[0x48, 0x8b, 0x05]); // mov rax, [rip + on@GOTPCREL]
    rel.push((c.len() as u64, InlineRel::On));
    c.extend_from_slice(&[0, 0, 0, 0]);
    c.extend_from_slice(&[0x80, 0x38, 0x00]); // cmp byte ptr [rax], 0
    c.extend_from_slice(&[0x75, 6]); // jne over the pop and the jmp
    c.push(POP[4]); // pop rax
    c.push(0xe9); // jmp body
    fix.push((c.len(), BODY));
    c.extend_from_slice(&[0, 0, 0, 0]);
    c.extend_from_slice(&PUSH[1..]);
    xs(&mut c, &mut rel);
    jcc(&mut c, &mut fix, 0x84, SLOW_E); // jz
    c.extend_from_slice(&[0x48, 0x8b, 0x31]); // mov rsi, [rcx]
    c.extend_from_slice(&[0x48, 0x85, 0xf6]); // test rsi, rsi
    c.extend_from_slice(&[0x74, 0]); // jz 1f
    let one_from = c.len();
    c.extend_from_slice(&[0x48, 0x89, 0xf2]); // mov rdx, rsi
    c.extend_from_slice(&[0x48, 0xc1, 0xe2, 0x05]); // shl rdx, 5
    c.extend_from_slice(&[0x48, 0x8d, 0x44, 0x24, 0x28]); // lea rax, [rsp + 40]
    c.extend_from_slice(&[0x48, 0x39, 0x44, 0x11, 0xf0]); // cmp [rcx + rdx - 16], rax
    jcc(&mut c, &mut fix, 0x86, SLOW_E); // jbe
    c[one_from - 1] = (c.len() - one_from) as u8;
    c.extend_from_slice(&[0x48, 0x3b, 0x71, 0x08]); // 1: cmp rsi, [rcx + 8]
    jcc(&mut c, &mut fix, 0x83, SLOW_E); // jae
    c.extend_from_slice(&[0x48, 0x8d, 0x56, 0x01]); // lea rdx, [rsi + 1]
    c.extend_from_slice(&[0x48, 0xc1, 0xe6, 0x05]); // shl rsi, 5
    c.extend_from_slice(&[0x48, 0x8d, 0x74, 0x31, 0x10]); // lea rsi, [rcx + rsi + 16]
    c.extend_from_slice(&[0x48, 0xc7, 0x06, 0xff, 0xff, 0xff, 0xff]); // mov qword [rsi], -1
    c.extend_from_slice(&[0x48, 0x89, 0x11]); // mov [rcx], rdx
    c.extend_from_slice(&[0x48, 0x8b, 0x44, 0x24, 0x28]); // mov rax, [rsp + 40]
    c.extend_from_slice(&[0x48, 0x89, 0x46, 0x08]); // mov [rsi + 8], rax
    c.extend_from_slice(&[0x48, 0x8d, 0x05]); // lea rax, [rip + R2]
    let r2_disp = c.len();
    c.extend_from_slice(&[0, 0, 0, 0]);
    c.extend_from_slice(&[0x48, 0x89, 0x46, 0x10]); // mov [rsi + 16], rax
    c.push(0xb8); // mov eax, id
    c.extend_from_slice(&id.to_le_bytes());
    c.extend_from_slice(&[0x48, 0x89, 0x46, 0x18]); // mov [rsi + 24], rax
    c.extend_from_slice(&[0x48, 0x8d, 0x44, 0x24, 0x28]); // lea rax, [rsp + 40]
    c.extend_from_slice(&[0x48, 0x89, 0x06]); // mov [rsi], rax
    hook(&mut c, &mut rel, keep.entry, InlineRel::EnterFn);
    // jmp short BC: over SLOW_E's pops (5) and the head's first 13 bytes.
    c.extend_from_slice(&[0xeb, 5 + 13]);
    let slow_e = c.len();
    c.extend_from_slice(&POP);
    // The out-of-line trampoline's head, as TRAMP_HEAD up to R2.
    let head = c.len();
    let mut h = TRAMP_HEAD;
    h[TRAMP_ID_AT..TRAMP_ID_AT + 4].copy_from_slice(&id.to_le_bytes());
    h[TRAMP_KEEP_AT] = keep.entry;
    h[TRAMP_KEEP_AT + 1] = keep.exit;
    c.extend_from_slice(&h[..23]);
    rel.push(((head as u64) + TRAMP_ENTER_AT, InlineRel::EnterT));
    rel.push(((head as u64) + TRAMP_BODY_CALL_AT, InlineRel::Body));
    // R2: exit.
    let r2 = c.len();
    let d = (r2 as i64 - (r2_disp as i64 + 4)) as i32;
    c[r2_disp..r2_disp + 4].copy_from_slice(&d.to_le_bytes());
    c.extend_from_slice(&[0x48, 0x8d, 0x64, 0x24, 0xf8]); // lea rsp, [rsp - 8]
    c.extend_from_slice(&PUSH);
    xs(&mut c, &mut rel);
    jcc(&mut c, &mut fix, 0x84, SLOW_X); // jz
    c.extend_from_slice(&[0x48, 0x8b, 0x31]); // mov rsi, [rcx]
    c.extend_from_slice(&[0x48, 0x85, 0xf6]); // test rsi, rsi
    jcc(&mut c, &mut fix, 0x84, SLOW_X); // jz
    c.extend_from_slice(&[0x48, 0xc1, 0xe6, 0x05]); // shl rsi, 5
    c.extend_from_slice(&[0x48, 0x8d, 0x74, 0x31, 0xf0]); // lea rsi, [rcx + rsi - 16]
    c.extend_from_slice(&[0x48, 0x8d, 0x44, 0x24, 0x28]); // lea rax, [rsp + 40]
    c.extend_from_slice(&[0x48, 0x39, 0x06]); // cmp [rsi], rax
    jcc(&mut c, &mut fix, 0x85, SLOW_X); // jne
    c.extend_from_slice(&[0x48, 0x8b, 0x46, 0x08]); // mov rax, [rsi + 8]
    c.extend_from_slice(&[0x48, 0x89, 0x44, 0x24, 0x28]); // mov [rsp + 40], rax
    c.extend_from_slice(&[0x48, 0xc7, 0x06, 0xff, 0xff, 0xff, 0xff]); // mov qword [rsi], -1
    c.extend_from_slice(&[0x48, 0x29, 0xce]); // sub rsi, rcx
    c.extend_from_slice(&[0x48, 0xc1, 0xee, 0x05]); // shr rsi, 5
    c.extend_from_slice(&[0x48, 0x89, 0x31]); // mov [rcx], rsi
    hook(&mut c, &mut rel, keep.exit, InlineRel::LeaveFn);
    c.push(0xc3);
    // The exit count 21 bytes before R3 (SLOW_X + 5 + 5), as the
    // runtime's ordinary-hook path reads it.
    c.push(keep.exit);
    c.extend_from_slice(&[INT3; 10]);
    let slow_x = c.len();
    c.extend_from_slice(&POP);
    c.push(0xe8); // call leave_t
    rel.push((c.len() as u64, InlineRel::LeaveT));
    c.extend_from_slice(&[0, 0, 0, 0]);
    // R3 is here.
    debug_assert_eq!(c[c.len() - 21], keep.exit);
    c.push(0xc3);
    let body = c.len();
    for (at, label) in fix {
        let to = match label {
            SLOW_E => slow_e,
            SLOW_X => slow_x,
            _ => body,
        };
        let d = (to as i64 - (at as i64 + 4)) as i32;
        c[at..at + 4].copy_from_slice(&d.to_le_bytes());
    }
    (c, rel)
}

const STUB_SECTION: &[u8] = b".text.mantle_instr";
const STUB_ALIGN: usize = 16;
pub(crate) const INT3: u8 = 0xcc;

/// A site: `call stub; jmp short over; .long id; int3...`. The stub
/// returns to the `jmp` behind the call, so every call has its `ret` and
/// the CPU's return predictor stays right (the paper's stub jumped back,
/// which leaves one return-stack entry behind per call: measured 110 ns
/// a call on bzip2 against 20-30 here, bench/instr).
pub const SITE_LEN: usize = 11;
/// A stub:
///   call __mantle_instr_enter        ; reads the id at [site return + 2]
///   pop qword ptr [rsp + q]          ; parks the site return address in
///                                    ; slot q (rsp = entry rsp)
///   <overwritten instructions>       ; rsp = entry rsp - D
///   push qword ptr [rsp + q + D]     ; and returns to the site's `jmp`
///   ret
/// No register is used: every register reaches the function as its caller
/// left it. `pop m` computes its address after the increment (SDM, POP).
const STUB_CALL: [u8; 5] = [0xe8, 0, 0, 0, 0];

fn modrm_rsp(op: u8, reg: u8, disp: i32) -> Vec<u8> {
    let mut v = vec![op];
    if i8::try_from(disp).is_ok() {
        v.extend_from_slice(&[0x44 | reg << 3, 0x24, disp as i8 as u8]);
    } else {
        v.extend_from_slice(&[0x84 | reg << 3, 0x24]);
        v.extend_from_slice(&disp.to_le_bytes());
    }
    v
}

fn section_symbol(b: &mut Builder<'_>, sec: SectionId) -> SymbolId {
    if let Some(s) = b
        .symbols
        .iter()
        .find(|s| s.section == Some(sec) && s.st_type() == elf::STT_SECTION)
    {
        return s.id();
    }
    let s = b.symbols.add();
    s.section = Some(sec);
    s.set_st_info(elf::STB_LOCAL, elf::STT_SECTION);
    s.id()
}

/// The relocation section of `target`, created if it has none.
fn rela_of(b: &mut Builder<'_>, target: SectionId, symtab: SectionId) -> SectionId {
    if let Some(s) = b
        .sections
        .iter()
        .find(|s| s.sh_info_section == Some(target) && matches!(s.data, SectionData::Relocation(_)))
    {
        return s.id();
    }
    let mut name = b".rela".to_vec();
    name.extend_from_slice(&b.sections.get(target).name);
    let s = b.sections.add();
    s.name = name.into();
    s.sh_type = elf::SHT_RELA;
    s.sh_flags = u64::from(elf::SHF_INFO_LINK);
    s.sh_link_section = Some(symtab);
    s.sh_info_section = Some(target);
    s.sh_addralign = 8;
    s.sh_entsize = 24;
    s.data = SectionData::Relocation(Vec::new());
    s.id()
}

/// The symbol a moved relocation refers to in the output.
fn moved_symbol(
    b: &mut Builder<'_>,
    sym_ids: &HashMap<usize, SymbolId>,
    sym: RelSym,
) -> Result<SymbolId, crate::Error> {
    match sym {
        RelSym::Sym(i) => sym_ids
            .get(&i)
            .copied()
            .ok_or_else(|| crate::Error::Malformed("relocation names no symbol".into())),
        RelSym::SectionOf(s) => {
            let sec = b
                .sections
                .iter()
                .find(|x| x.id().index() == s)
                .map(|x| x.id());
            Ok(section_symbol(
                b,
                sec.ok_or_else(|| crate::Error::Malformed("no section".into()))?,
            ))
        }
    }
}

fn relocs_mut<'b>(b: &'b mut Builder<'_>, id: SectionId) -> &'b mut Vec<Relocation> {
    match &mut b.sections.get_mut(id).data {
        SectionData::Relocation(v) => v,
        _ => unreachable!("rela_of returns relocation sections"),
    }
}

/// Bytes of a section overwritten by a jump or call to the stub section.
struct Patch {
    section: SectionId,
    start: u64,
    covered: usize,
}

impl Patch {
    /// Writes `code` (a rel32 `call` or `jmp` first, then anything) at the
    /// start, `int3` over the rest, drops the relocations of the
    /// overwritten bytes and points the rel32 at `target` in the stub
    /// section.
    fn apply(
        &self,
        b: &mut Builder<'_>,
        symtab: SectionId,
        stub_sym: SymbolId,
        code: &[u8],
        target: u64,
    ) {
        let mut data = section_bytes(b, self.section).to_vec();
        let at = self.start as usize;
        data[at..at + code.len()].copy_from_slice(code);
        data[at + code.len()..at + self.covered].fill(INT3);
        b.sections.get_mut(self.section).data = SectionData::Data(data.into());
        let rela = rela_of(b, self.section, symtab);
        let end = self.start + self.covered as u64;
        let rs = relocs_mut(b, rela);
        rs.retain(|r| r.r_offset < self.start || r.r_offset >= end);
        rs.push(Relocation {
            r_offset: self.start + 1,
            symbol: Some(stub_sym),
            r_type: elf::R_X86_64_PC32,
            r_addend: target as i64 - 4,
        });
    }
}

/// Rewrites `b` as planned (an object without section groups, or the
/// planning builder of a linked file): one stub section.
pub fn apply(b: &mut Builder<'_>, plan: &Plan) -> Result<(), crate::Error> {
    apply_in_groups(b, plan, &mut Groups::default(), false)
}

/// Rewrites `b` as planned. The stubs, exit stubs and trampolines of the
/// functions in a section group go to a stub section of their own that
/// joins the group (its relocation section joins it at
/// [`Groups::restore`]): the linker keeps or discards them with the
/// function, and no kept section refers to a discarded one (a trampoline
/// jumps back into its function through the section's local symbol, which
/// ld refuses from outside the group). Stubs are shared within a section
/// group or among ungrouped functions, not across.
pub(crate) fn apply_in_groups(
    b: &mut Builder<'_>,
    plan: &Plan,
    groups: &mut Groups,
    inline: bool,
) -> Result<(), crate::Error> {
    if plan.sites.is_empty() {
        return Ok(());
    }
    let mut parts: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
    for (i, s) in plan.sites.iter().enumerate() {
        parts.entry(groups.of(s.section)).or_default().push(i);
    }
    if parts.len() == 1 && parts.contains_key(&None) {
        emit(b, plan, STUB_SECTION, inline)?;
    } else {
        for (g, sites) in parts {
            let mut name = STUB_SECTION.to_vec();
            if let Some(g) = g {
                name.push(b'.');
                name.extend_from_slice(groups.signature(g).as_bytes());
            }
            let sec = emit(b, &subset(plan, &sites), &name, inline)?;
            if let Some(g) = g {
                groups.add(g, sec);
            }
        }
    }
    for id in b.sections.iter().map(|s| s.id()).collect::<Vec<_>>() {
        if let SectionData::Relocation(v) = &mut b.sections.get_mut(id).data {
            v.sort_by_key(|r| r.r_offset);
        }
    }
    // Trampolines and patched rets keep every call paired with its ret,
    // which a shadow stack checks; a return frame's ret does not.
    if plan.cet && plan.return_frames {
        clear_cet(b);
    }
    Ok(())
}

/// The part of `plan` with these sites, its stubs, exit stubs and
/// trampolines renumbered in order of first use.
fn subset(plan: &Plan, sites: &[usize]) -> Plan {
    let mut out = Plan {
        cet: plan.cet,
        return_frames: plan.return_frames,
        mode: plan.mode,
        ..Plan::default()
    };
    let mut stubs = HashMap::new();
    let mut exits = HashMap::new();
    for &i in sites {
        let mut s = plan.sites[i].clone();
        let old = s.stub;
        match s.tramp {
            Some(t) => {
                s.stub = out.trampolines.len();
                s.tramp = Some(s.stub);
                out.trampolines.push(plan.trampolines[t].clone());
            }
            None => {
                s.stub = *stubs.entry(old).or_insert_with(|| {
                    out.stubs.push(plan.stubs[old].clone());
                    out.stubs.len() - 1
                });
            }
        }
        for e in &mut s.exits {
            let old = e.stub;
            e.stub = *exits.entry(old).or_insert_with(|| {
                out.exit_stubs.push(plan.exit_stubs[old].clone());
                out.exit_stubs.len() - 1
            });
        }
        out.sites.push(s);
    }
    out
}

/// Emits the stub section `name` for `plan` and patches its sites;
/// returns the stub section.
fn emit(
    b: &mut Builder<'_>,
    plan: &Plan,
    name: &[u8],
    inline: bool,
) -> Result<SectionId, crate::Error> {
    let symtab = b
        .sections
        .iter()
        .find(|s| s.sh_type == elf::SHT_SYMTAB)
        .map(|s| s.id())
        .ok_or_else(|| crate::Error::Malformed("no symbol table".into()))?;
    let sym_ids: HashMap<usize, SymbolId> =
        b.symbols.iter().map(|s| (s.id().index(), s.id())).collect();

    // The stub section and the symbols its code refers to.
    let stub_sec = {
        let s = b.sections.add();
        s.name = name.to_vec().into();
        s.sh_type = elf::SHT_PROGBITS;
        s.sh_flags = u64::from(elf::SHF_ALLOC | elf::SHF_EXECINSTR);
        s.sh_addralign = STUB_ALIGN as u64;
        s.id()
    };
    let stub_sym = section_symbol(b, stub_sec);
    let mut undef = |name: &'static [u8]| {
        // Another group's stub section may have added it already.
        if let Some(s) = b
            .symbols
            .iter()
            .find(|s| s.section.is_none() && &*s.name == name)
        {
            return s.id();
        }
        let s = b.symbols.add();
        s.name = name.into();
        s.set_st_info(elf::STB_GLOBAL, elf::STT_NOTYPE);
        s.id()
    };
    let enter = undef(ENTER_SYMBOL);
    let enter_b = undef(ENTER_B_SYMBOL);
    let leave_b = undef(LEAVE_B_SYMBOL);
    let enter_t = undef(ENTER_T_SYMBOL);
    let leave_t = undef(LEAVE_T_SYMBOL);
    let inline_syms = if inline {
        Some((
            undef(XS_SYMBOL),
            undef(ENTER_FN_SYMBOL),
            undef(LEAVE_FN_SYMBOL),
            undef(ON_SYMBOL),
        ))
    } else {
        None
    };
    if let Some((xs, _, _, _)) = inline_syms {
        // A thread-local variable: the linker checks the reference's type.
        b.symbols
            .get_mut(xs)
            .set_st_info(elf::STB_GLOBAL, elf::STT_TLS);
    }
    let mut code = Vec::new();
    let mut stub_relocs = Vec::new();
    let mut stub_at = Vec::with_capacity(plan.stubs.len());
    for k in &plan.stubs {
        let at = code.len() as u64;
        stub_at.push(at);
        code.extend_from_slice(&STUB_CALL);
        code.extend_from_slice(&modrm_rsp(0x8f, 0, k.resume_slot));
        stub_relocs.push(Relocation {
            r_offset: at + 1,
            symbol: Some(if k.balanced { enter_b } else { enter }),
            r_type: elf::R_X86_64_PLT32,
            r_addend: -4,
        });
        let body = code.len() as u64;
        code.extend_from_slice(&k.code);
        for r in &k.relocs {
            let symbol = moved_symbol(b, &sym_ids, r.sym)?;
            stub_relocs.push(Relocation {
                r_offset: body + r.offset,
                symbol: Some(symbol),
                r_type: r.r_type,
                r_addend: r.addend,
            });
        }
        code.extend_from_slice(&modrm_rsp(0xff, 6, k.resume_slot + k.depth as i32));
        code.push(0xc3);
        while !code.len().is_multiple_of(STUB_ALIGN) {
            code.push(INT3);
        }
    }
    let mut exit_at = Vec::with_capacity(plan.exit_stubs.len());
    for k in &plan.exit_stubs {
        let at = code.len() as u64;
        exit_at.push(at);
        code.extend_from_slice(&k.code);
        for r in &k.relocs {
            let symbol = moved_symbol(b, &sym_ids, r.sym)?;
            stub_relocs.push(Relocation {
                r_offset: at + r.offset,
                symbol: Some(symbol),
                r_type: r.r_type,
                r_addend: r.addend,
            });
        }
        stub_relocs.push(Relocation {
            r_offset: code.len() as u64 + 1,
            symbol: Some(leave_b),
            r_type: elf::R_X86_64_PLT32,
            r_addend: -4,
        });
        code.extend_from_slice(&STUB_CALL);
        if k.ret_pop == 0 {
            code.push(0xc3);
        } else {
            code.push(0xc2);
            code.extend_from_slice(&k.ret_pop.to_le_bytes());
        }
        while !code.len().is_multiple_of(STUB_ALIGN) {
            code.push(INT3);
        }
    }
    let mut tramp_at = Vec::with_capacity(plan.trampolines.len());
    for (t, site) in plan
        .sites
        .iter()
        .filter_map(|s| Some((&plan.trampolines[s.tramp?], s)))
    {
        let at = code.len() as u64;
        tramp_at.push(at);
        if let Some((xs, enter_fn, leave_fn, on)) = inline_syms {
            let (bytes, rels) = inline_tramp(site.id, t.keep);
            code.extend_from_slice(&bytes);
            let body = code.len() as u64;
            for (o, r) in rels {
                let (symbol, r_type, r_addend) = match r {
                    InlineRel::XsTls => (xs, elf::R_X86_64_GOTTPOFF, -4),
                    InlineRel::EnterFn => (enter_fn, elf::R_X86_64_REX_GOTPCRELX, -4),
                    InlineRel::LeaveFn => (leave_fn, elf::R_X86_64_REX_GOTPCRELX, -4),
                    InlineRel::On => (on, elf::R_X86_64_REX_GOTPCRELX, -4),
                    InlineRel::EnterT => (enter_t, elf::R_X86_64_PLT32, -4),
                    InlineRel::LeaveT => (leave_t, elf::R_X86_64_PLT32, -4),
                    InlineRel::Body => (stub_sym, elf::R_X86_64_PC32, body as i64 - 4),
                };
                stub_relocs.push(Relocation {
                    r_offset: at + o,
                    symbol: Some(symbol),
                    r_type,
                    r_addend,
                });
            }
            code.extend_from_slice(&t.code);
            for r in &t.relocs {
                let symbol = moved_symbol(b, &sym_ids, r.sym)?;
                stub_relocs.push(Relocation {
                    r_offset: body + r.offset,
                    symbol: Some(symbol),
                    r_type: r.r_type,
                    r_addend: r.addend,
                });
            }
            let back = section_symbol(b, site.section);
            stub_relocs.push(Relocation {
                r_offset: code.len() as u64 + 1,
                symbol: Some(back),
                r_type: elf::R_X86_64_PC32,
                r_addend: (site.start + site.covered as u64) as i64 - 4,
            });
            code.extend_from_slice(&[0xe9, 0, 0, 0, 0]);
            while !code.len().is_multiple_of(STUB_ALIGN) {
                code.push(INT3);
            }
            continue;
        }
        let mut head = TRAMP_HEAD;
        head[TRAMP_ID_AT..TRAMP_ID_AT + 4].copy_from_slice(&site.id.to_le_bytes());
        head[TRAMP_KEEP_AT] = t.keep.entry;
        head[TRAMP_KEEP_AT + 1] = t.keep.exit;
        code.extend_from_slice(&head);
        let body = code.len() as u64;
        let call = |r_offset, symbol, r_type, r_addend| Relocation {
            r_offset,
            symbol: Some(symbol),
            r_type,
            r_addend,
        };
        stub_relocs.push(call(at + TRAMP_ENTER_AT, enter_t, elf::R_X86_64_PLT32, -4));
        stub_relocs.push(call(
            at + TRAMP_BODY_CALL_AT,
            stub_sym,
            elf::R_X86_64_PC32,
            body as i64 - 4,
        ));
        stub_relocs.push(call(at + TRAMP_LEAVE_AT, leave_t, elf::R_X86_64_PLT32, -4));
        code.extend_from_slice(&t.code);
        for r in &t.relocs {
            let symbol = moved_symbol(b, &sym_ids, r.sym)?;
            stub_relocs.push(call(body + r.offset, symbol, r.r_type, r.addend));
        }
        // Back behind the patch.
        let back = section_symbol(b, site.section);
        stub_relocs.push(call(
            code.len() as u64 + 1,
            back,
            elf::R_X86_64_PC32,
            (site.start + site.covered as u64) as i64 - 4,
        ));
        code.extend_from_slice(&[0xe9, 0, 0, 0, 0]);
        while !code.len().is_multiple_of(STUB_ALIGN) {
            code.push(INT3);
        }
    }
    b.sections.get_mut(stub_sec).data = SectionData::Data(code.into());
    let stub_rela = rela_of(b, stub_sec, symtab);
    *relocs_mut(b, stub_rela) = stub_relocs;

    // The sites.
    let mut trampolines = tramp_at.into_iter();
    for s in &plan.sites {
        let (code, target) = match s.tramp {
            Some(_) => (
                vec![0xe9, 0, 0, 0, 0],
                trampolines.next().unwrap_or_default(),
            ),
            None => {
                // covered <= SITE_LEN + 14 (longest instruction): rel8 reaches.
                let mut c = vec![0xe8, 0, 0, 0, 0, 0xeb, (s.covered - 7) as u8];
                c.extend_from_slice(&s.id.to_le_bytes());
                (c, stub_at[s.stub])
            }
        };
        let site = Patch {
            section: s.section,
            start: s.start,
            covered: s.covered,
        };
        site.apply(b, symtab, stub_sym, &code, target);
        for e in &s.exits {
            let exit = Patch {
                section: s.section,
                start: e.start,
                covered: e.covered,
            };
            exit.apply(b, symtab, stub_sym, &[0xe9, 0, 0, 0, 0], exit_at[e.stub]);
        }
    }
    Ok(stub_sec)
}

const GNU_PROPERTY_X86_FEATURE_1_AND: u32 = 0xc000_0002;
pub(crate) const FEATURE_IBT_SHSTK: u32 = 0b11;

/// Visits the x86 feature words of `.note.gnu.property` (offset into the
/// note data of each 4-byte word).
pub(crate) fn cet_words(note: &[u8]) -> Vec<usize> {
    let u32_at = |o: usize| {
        note.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut out = Vec::new();
    let mut o = 0usize;
    while let (Some(namesz), Some(descsz), Some(ty)) = (u32_at(o), u32_at(o + 4), u32_at(o + 8)) {
        let name_end = o + 12 + (namesz as usize).next_multiple_of(4);
        let desc_end = name_end.saturating_add(descsz as usize);
        if desc_end > note.len() {
            break;
        }
        if ty == elf::NT_GNU_PROPERTY_TYPE_0 {
            let mut p = name_end;
            while let (Some(pt), Some(sz)) = (u32_at(p), u32_at(p + 4)) {
                if p + 8 + sz as usize > desc_end {
                    break;
                }
                if pt == GNU_PROPERTY_X86_FEATURE_1_AND && sz >= 4 {
                    out.push(p + 8);
                }
                p += (8 + sz as usize).next_multiple_of(8);
            }
        }
        o = desc_end.next_multiple_of(8);
    }
    out
}

fn gnu_property(b: &Builder<'_>) -> Option<SectionId> {
    b.sections
        .iter()
        .find(|s| s.sh_type == elf::SHT_NOTE && &*s.name == b".note.gnu.property")
        .map(|s| s.id())
}

fn note_bytes<'a>(b: &'a Builder<'_>, id: SectionId) -> &'a [u8] {
    match &b.sections.get(id).data {
        SectionData::Note(d) | SectionData::Data(d) => d.as_slice(),
        _ => &[],
    }
}

/// Whether the object is marked for IBT or shadow stacks.
pub fn has_cet(b: &Builder<'_>) -> bool {
    let Some(id) = gnu_property(b) else {
        return false;
    };
    let note = note_bytes(b, id);
    cet_words(note).into_iter().any(|w| {
        u32::from_le_bytes(note[w..w + 4].try_into().unwrap_or_default()) & FEATURE_IBT_SHSTK != 0
    })
}

/// Clears IBT and SHSTK: a return frame's `ret` would fault on a shadow
/// stack and the stub's indirect `jmp` lands without `endbr64`. The linker
/// ANDs the property over all objects, so the program runs without them.
fn clear_cet(b: &mut Builder<'_>) {
    let Some(id) = gnu_property(b) else { return };
    let mut note = note_bytes(b, id).to_vec();
    for w in cet_words(&note) {
        let v =
            u32::from_le_bytes(note[w..w + 4].try_into().unwrap_or_default()) & !FEATURE_IBT_SHSTK;
        note[w..w + 4].copy_from_slice(&v.to_le_bytes());
    }
    let s = b.sections.get_mut(id);
    s.data = match s.data {
        SectionData::Note(_) => SectionData::Note(note.into()),
        _ => SectionData::Data(note.into()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};

    /// The inline trampoline's head: with `__mantle_instr_on` zero it
    /// restores rax and jumps to the body (the bytes right behind the
    /// trampoline), having pushed nothing; otherwise it goes on to push
    /// the other four scratch registers.
    #[test]
    fn inline_trampoline_skips_to_the_body_when_nothing_is_on() {
        let (c, rel) = inline_tramp(7, crate::vregs::Keep { entry: 3, exit: 1 });
        let mut d = Decoder::with_ip(64, &c, 0, DecoderOptions::NONE);
        let ins: Vec<_> = (0..7).map(|_| d.decode()).collect();
        let m: Vec<_> = ins.iter().map(|i| i.mnemonic()).collect();
        assert_eq!(
            m,
            [
                Mnemonic::Push,
                Mnemonic::Mov,
                Mnemonic::Cmp,
                Mnemonic::Jne,
                Mnemonic::Pop,
                Mnemonic::Jmp,
                Mnemonic::Push
            ]
        );
        assert_eq!(ins[0].op0_register(), Register::RAX);
        // mov rax, [rip + on@GOTPCREL]: the relocation at its field.
        assert_eq!(ins[1].op0_register(), Register::RAX);
        assert_eq!(ins[1].memory_base(), Register::RIP);
        assert_eq!(rel[0], (ins[1].ip() + 3, InlineRel::On));
        // cmp byte ptr [rax], 0
        assert_eq!(ins[2].op0_kind(), OpKind::Memory);
        assert_eq!(ins[2].memory_base(), Register::RAX);
        assert_eq!(ins[2].immediate8(), 0);
        assert_eq!(ins[3].near_branch_target(), ins[6].ip());
        assert_eq!(ins[4].op0_register(), Register::RAX);
        assert_eq!(ins[5].near_branch_target(), c.len() as u64);
        assert_eq!(ins[6].op0_register(), Register::RCX);
    }
}
