//! Which vector registers a trampoline must keep around an ordinary C
//! hook. Pure: reads the decoded object, makes no system call.
//!
//! Why: an ordinary hook may clobber every caller-saved register, so the
//! runtime saved all of them around each hook call, xmm0-15 included:
//! 32 vector stores and loads a call, most of the difference between
//! ordinary and fast hooks (bench/instr/RESULTS.md, issue 13). Only two
//! kinds of vector values can be live when a hook runs at a function F's
//! entry or exit:
//! * F's own arguments (xmm0-7) at entry and results (xmm0-1) at exit.
//!   They are live only if F, or code F calls or jumps to, can touch
//!   them: so they are kept when F's *callees* (transitively) mention
//!   them, and all of them when any callee is unknown (another object, an
//!   indirect call);
//! * values F's *callers* keep in caller-saved registers across the call.
//!   The ABI lets no caller do that, but GCC's -fipa-ra does, for a callee
//!   in the same unit whose body does not touch the register. Such a caller
//!   mentions the register (it writes it before the call and reads it
//!   after), as does any function up its chain of direct calls, so the
//!   registers mentioned by F's *callers*, transitively, are kept. Callers
//!   outside the object, and indirect calls, follow the ABI; a direct
//!   branch to F from code that belongs to no function symbol could be
//!   anything: then everything is kept. And no caller keeps anything
//!   across F when F, or anything it may call or jump to, *calls* code
//!   that follows the ABI (a function outside the object, an indirect
//!   call): GCC's -fipa-ra takes F's clobbers as the union over its
//!   paths, and such a call clobbers every caller-saved register. Most
//!   functions of a real program are so (SQLite: issue 35); their hooks
//!   keep only the argument and result registers.
//!
//! The result is a count per end: xmm0 up to (not including) xmm`n` are
//! saved; 16 is the old full save. Registers xmm16-31 (AVX-512) and the
//! upper halves of ymm/zmm are never saved by the runtime; a function
//! whose callers mention them keeps the full save (documented limit).

use crate::plan::{section_bytes, Object};
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, OpKind};
use object::build::Id;
use object::elf;
use std::collections::{BTreeMap, HashMap};

/// xmm0 up to xmm`entry` (resp. `exit`) are kept around the hook at the
/// function's entry (resp. exit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    pub entry: u8,
    pub exit: u8,
}

impl Keep {
    /// What the runtime kept before this analysis: everything.
    pub const ALL: Keep = Keep {
        entry: 16,
        exit: 16,
    };
}

/// Everything (a register the runtime does not save, or unknown code).
const ALL: u32 = u32::MAX;

/// A function: its section, start and end (section offsets).
#[derive(Debug, Clone, Copy)]
struct Func {
    sec: usize,
    start: u64,
    end: u64,
}

/// Where a direct branch goes: a function of this file, or `None` (inside
/// no function of this file, or not in this file at all).
type Dest = Option<usize>;

/// The per-function facts the answer is computed from.
struct Graph {
    funcs: Vec<Func>,
    /// Vector registers each function mentions (bit k: xmm/ymm/zmm k; ALL
    /// for one the runtime cannot keep).
    mentions: Vec<u32>,
    /// Functions each function calls or jumps to directly.
    callees: Vec<Vec<usize>>,
    /// Functions with a direct branch to each function.
    callers: Vec<Vec<usize>>,
    /// Code outside every function branches to each function.
    from_unknown: Vec<bool>,
    /// Each function calls something this file cannot see into.
    calls_unknown: Vec<bool>,
    /// Each function has a `call` (not a jump: a jump table's `jmp rax`
    /// clobbers nothing) to code this file cannot see into, which
    /// follows the ABI and so clobbers every caller-saved register.
    calls_abi: Vec<bool>,
}

/// The analysed file: [`Keeps::get`] answers for one function, so a
/// rewrite of a few functions of a large library walks only their callers
/// and callees.
pub struct Keeps {
    g: Graph,
    by_start: HashMap<(usize, u64), usize>,
}

/// Reads the file's functions, their vector registers and direct branches.
pub fn analyze(o: &Object<'_, '_>) -> Keeps {
    let g = graph(o);
    let by_start = g
        .funcs
        .iter()
        .enumerate()
        .map(|(i, f)| ((f.sec, f.start), i))
        .collect();
    Keeps { g, by_start }
}

impl Keeps {
    /// What the hooks of the function at `off` in section `sec` (builder
    /// index) keep; `None` for an address where no function starts.
    pub fn get(&self, sec: usize, off: u64) -> Option<Keep> {
        self.by_start.get(&(sec, off)).map(|&i| keep(&self.g, i))
    }
}

fn keep(g: &Graph, f: usize) -> Keep {
    // Up the callers: what they may keep in registers across the call.
    let n = g.funcs.len();
    let (up, unknown_caller) = closure(n, f, |i| &g.callers[i], |i| g.from_unknown[i]);
    // F's own registers are dead once it returns, unless F is among its
    // callers (recursion): `up` then holds it.
    let mut across = 0;
    for &i in &up {
        across |= g.mentions[i];
    }
    // Down the callees: who may read the arguments or write the results.
    let (down, unknown_callee) = closure(n, f, |i| &g.callees[i], |i| g.calls_unknown[i]);
    // F may clobber everything: its callers keep nothing across it.
    if g.calls_abi[f] || down.iter().any(|&i| g.calls_abi[i]) {
        across = 0;
    }
    if unknown_caller {
        across = ALL;
    }
    let mut inside = g.mentions[f];
    for &i in &down {
        inside |= g.mentions[i];
    }
    if unknown_callee {
        inside = ALL;
    }
    let count = |m: u32| -> u8 {
        if m & !0xffff != 0 {
            16
        } else {
            (16 - (m as u16).leading_zeros()) as u8
        }
    };
    Keep {
        entry: count(across | (inside & 0xff)),
        exit: count(across | (inside & 0x3)),
    }
}

/// The functions reachable from `f` (of `n`) along `next` (`f` itself
/// only if a cycle comes back to it), and whether any of them (or `f`) is
/// `flagged`. Linear in the edges walked.
fn closure<'g>(
    n: usize,
    f: usize,
    next: impl Fn(usize) -> &'g [usize],
    flagged: impl Fn(usize) -> bool,
) -> (Vec<usize>, bool) {
    let mut reached = vec![false; n];
    let mut out = Vec::new();
    let mut todo = vec![f];
    let mut flag = flagged(f);
    while let Some(i) = todo.pop() {
        for &j in next(i) {
            if !reached[j] {
                reached[j] = true;
                out.push(j);
                flag |= flagged(j);
                // f's own edges were walked first.
                if j != f {
                    todo.push(j);
                }
            }
        }
    }
    (out, flag)
}

/// Bits of the vector registers `ins` reads or writes.
fn vector_mentions(info: &mut InstructionInfoFactory, ins: &Instruction) -> u32 {
    let mut m = 0u32;
    for u in info.info(ins).used_registers() {
        let r = u.register();
        if r.is_xmm() || r.is_ymm() || r.is_zmm() {
            let n = r.number();
            m |= if n < 16 && !r.is_zmm() { 1 << n } else { ALL };
        }
    }
    // State saves and restores (xsave, fxrstor, ...) touch every register
    // without naming one.
    if matches!(
        ins.mnemonic(),
        iced_x86::Mnemonic::Xsave
            | iced_x86::Mnemonic::Xsave64
            | iced_x86::Mnemonic::Xsavec
            | iced_x86::Mnemonic::Xsavec64
            | iced_x86::Mnemonic::Xsaveopt
            | iced_x86::Mnemonic::Xsaveopt64
            | iced_x86::Mnemonic::Xsaves
            | iced_x86::Mnemonic::Xsaves64
            | iced_x86::Mnemonic::Xrstor
            | iced_x86::Mnemonic::Xrstor64
            | iced_x86::Mnemonic::Xrstors
            | iced_x86::Mnemonic::Xrstors64
            | iced_x86::Mnemonic::Fxsave
            | iced_x86::Mnemonic::Fxsave64
            | iced_x86::Mnemonic::Fxrstor
            | iced_x86::Mnemonic::Fxrstor64
            | iced_x86::Mnemonic::Vzeroall
            | iced_x86::Mnemonic::Vzeroupper
    ) {
        m = ALL;
    }
    m
}

fn graph(o: &Object<'_, '_>) -> Graph {
    let b = o.b;
    // Functions: defined STT_FUNC symbols with a size, one per start.
    let mut by_start: BTreeMap<(usize, u64), u64> = BTreeMap::new();
    for s in b.symbols.iter() {
        let Some(sec) = s.section else { continue };
        if s.st_type() == elf::STT_FUNC && s.st_size > 0 {
            let e = by_start.entry((sec.index(), s.st_value)).or_insert(0);
            *e = (*e).max(s.st_size);
        }
    }
    let funcs: Vec<Func> = by_start
        .iter()
        .map(|(&(sec, start), &size)| Func {
            sec,
            start,
            end: start.saturating_add(size),
        })
        .collect();
    let n = funcs.len();
    let find = |sec: usize, off: u64| -> Option<usize> {
        // The last function starting at or before `off` in `sec`.
        let i = funcs.partition_point(|f| (f.sec, f.start) <= (sec, off));
        let f = funcs.get(i.checked_sub(1)?)?;
        (f.sec == sec && off < f.end).then_some(i - 1)
    };
    // Linked files: a branch leaving its section is resolved by address.
    let addrs: Vec<(u64, u64, usize)> = b
        .sections
        .iter()
        .filter(|s| s.sh_addr != 0 && s.sh_flags & u64::from(elf::SHF_ALLOC) != 0)
        .map(|s| {
            (
                s.sh_addr,
                s.sh_addr.saturating_add(s.sh_size),
                s.id().index(),
            )
        })
        .collect();
    // Linked files: the PLT's address ranges (calls out of the file).
    let plts: Vec<(u64, u64)> = b
        .sections
        .iter()
        .filter(|s| s.sh_addr != 0 && s.name.starts_with(b".plt"))
        .map(|s| (s.sh_addr, s.sh_addr.saturating_add(s.sh_size)))
        .collect();
    let mut g = Graph {
        mentions: vec![0; n],
        callees: vec![Vec::new(); n],
        callers: vec![Vec::new(); n],
        from_unknown: vec![false; n],
        calls_unknown: vec![false; n],
        calls_abi: vec![false; n],
        funcs: Vec::new(),
    };
    let mut info = InstructionInfoFactory::new();
    for s in b.sections.iter() {
        if s.sh_type != elf::SHT_PROGBITS || s.sh_flags & u64::from(elf::SHF_EXECINSTR) == 0 {
            continue;
        }
        let sec = s.id().index();
        let data = section_bytes(b, s.id());
        let rel = o.relocs_of(sec);
        // Decoded piece by piece, cut at every function's start and end,
        // so padding between functions cannot shift the decoding of the
        // next one.
        let mut cuts: Vec<u64> = funcs
            .iter()
            .filter(|f| f.sec == sec)
            .flat_map(|f| [f.start, f.end])
            .chain([0, data.len() as u64])
            .filter(|&c| c <= data.len() as u64)
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut ins = Instruction::default();
        for w in cuts.windows(2) {
            let piece = &data[w[0] as usize..w[1] as usize];
            let mut dec = Decoder::with_ip(64, piece, w[0], DecoderOptions::NONE);
            while dec.can_decode() {
                dec.decode_out(&mut ins);
                if ins.is_invalid() {
                    continue;
                }
                let from = find(sec, ins.ip());
                if let Some(f) = from {
                    g.mentions[f] |= vector_mentions(&mut info, &ins);
                }
                let direct = matches!(
                    ins.flow_control(),
                    FlowControl::Call
                        | FlowControl::UnconditionalBranch
                        | FlowControl::ConditionalBranch
                ) && (0..ins.op_count()).any(|i| {
                    matches!(
                        ins.op_kind(i),
                        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
                    )
                });
                let indirect = matches!(
                    ins.flow_control(),
                    FlowControl::IndirectCall | FlowControl::IndirectBranch
                );
                if !direct && !indirect {
                    continue;
                }
                // A call to code outside the file, which follows the ABI:
                // indirect, to an undefined symbol (objects) or into the
                // PLT (linked files). Not a direct call to an address no
                // symbol covers (a stripped file's static function, which
                // -fipa-ra may know).
                let mut external = indirect;
                let dest: Dest = if indirect {
                    None
                } else {
                    let field = rel.and_then(|m| m.range(ins.ip()..ins.next_ip()).next());
                    if let Some((_, &(_, sym, _))) = field {
                        external = sym.is_some_and(|id| b.symbols.get(id).section.is_none());
                    } else if s.sh_addr != 0 {
                        let a = s.sh_addr.wrapping_add(ins.near_branch_target());
                        external = plts.iter().any(|&(lo, hi)| lo <= a && a < hi);
                    }
                    let at = match field {
                        // An object: the relocation names the target; its
                        // addend is relative to the field.
                        Some((&off, &(_, sym, addend))) => sym
                            .map(|id| b.symbols.get(id))
                            .and_then(|sy| Some((sy.section?.index(), sy.st_value)))
                            .map(|(tsec, v)| {
                                (
                                    tsec,
                                    v.wrapping_add(addend as u64)
                                        .wrapping_add(ins.next_ip() - off),
                                )
                            }),
                        None => {
                            let t = ins.near_branch_target();
                            if t < data.len() as u64 {
                                Some((sec, t))
                            } else if s.sh_addr != 0 {
                                let a = s.sh_addr.wrapping_add(t);
                                addrs
                                    .iter()
                                    .find(|&&(lo, hi, _)| lo <= a && a < hi)
                                    .map(|&(lo, _, i)| (i, a - lo))
                            } else {
                                None
                            }
                        }
                    };
                    at.and_then(|(tsec, t)| find(tsec, t))
                };
                match (from, dest) {
                    // A branch inside one function is not a call.
                    (Some(f), Some(t)) if f == t && !ins.is_call_near() => {}
                    (Some(f), Some(t)) => {
                        g.callees[f].push(t);
                        g.callers[t].push(f);
                    }
                    (Some(f), None) => {
                        // A jump to no function (a jump table's `jmp rax`, a
                        // tail call through the PLT) may leave with the
                        // arguments: the callee is unknown.
                        g.calls_unknown[f] = true;
                        g.calls_abi[f] |= external
                            && matches!(
                                ins.flow_control(),
                                FlowControl::Call | FlowControl::IndirectCall
                            );
                    }
                    (None, Some(t)) => g.from_unknown[t] = true,
                    (None, None) => {}
                }
            }
        }
    }
    g.funcs = funcs;
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::write::{Object as WObject, Relocation, StandardSection, Symbol, SymbolSection};
    use object::{Architecture, BinaryFormat, Endianness, SymbolFlags, SymbolKind, SymbolScope};

    /// A function of a test object: its bytes, and the functions it calls
    /// (by name, at byte offsets of `call rel32` fields).
    struct F<'a> {
        name: &'a str,
        code: Vec<u8>,
        calls: Vec<(usize, &'a str)>,
    }

    const RET: u8 = 0xc3;

    /// `call rel32` with a zero field (the relocation fills it).
    fn call() -> Vec<u8> {
        vec![0xe8, 0, 0, 0, 0]
    }

    /// `pxor xmmK, xmmK`.
    fn pxor(k: u8) -> Vec<u8> {
        let r = k & 7;
        let modrm = 0xc0 | (r << 3) | r;
        if k < 8 {
            vec![0x66, 0x0f, 0xef, modrm]
        } else {
            vec![0x66, 0x45, 0x0f, 0xef, modrm]
        }
    }

    fn func<'a>(name: &'a str, parts: &[&[u8]], calls: &[&'a str]) -> F<'a> {
        let mut code = Vec::new();
        let mut at = Vec::new();
        let mut c = calls.iter();
        for p in parts {
            if p.first() == Some(&0xe8) && p.len() == 5 {
                at.push((code.len() + 1, *c.next().expect("a callee per call")));
            }
            code.extend_from_slice(p);
        }
        F {
            name,
            code,
            calls: at,
        }
    }

    /// An ELF object with the functions in one `.text`, calls relocated
    /// (undefined names become undefined symbols), and `loose` bytes
    /// before the first function that belong to no symbol.
    fn object(funcs: &[F<'_>], loose: &[u8]) -> Vec<u8> {
        let mut o = WObject::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
        let text = o.section_id(StandardSection::Text);
        o.append_section_data(text, loose, 16);
        let mut ids = HashMap::new();
        let mut at = Vec::new();
        for f in funcs {
            let off = o.append_section_data(text, &f.code, 16);
            at.push(off);
            let id = o.add_symbol(Symbol {
                name: f.name.as_bytes().to_vec(),
                value: off,
                size: f.code.len() as u64,
                kind: SymbolKind::Text,
                scope: SymbolScope::Linkage,
                weak: false,
                section: SymbolSection::Section(text),
                flags: SymbolFlags::None,
            });
            ids.insert(f.name, id);
        }
        let mut sym = |o: &mut WObject, name: &str| {
            *ids.entry(name.to_string().leak()).or_insert_with(|| {
                o.add_symbol(Symbol {
                    name: name.as_bytes().to_vec(),
                    value: 0,
                    size: 0,
                    kind: SymbolKind::Text,
                    scope: SymbolScope::Linkage,
                    weak: false,
                    section: SymbolSection::Undefined,
                    flags: SymbolFlags::None,
                })
            })
        };
        for (f, off) in funcs.iter().zip(at) {
            for &(field, callee) in &f.calls {
                let symbol = sym(&mut o, callee);
                o.add_relocation(
                    text,
                    Relocation {
                        offset: off + field as u64,
                        symbol,
                        addend: -4,
                        flags: object::RelocationFlags::Elf {
                            r_type: elf::R_X86_64_PLT32,
                        },
                    },
                )
                .unwrap();
            }
        }
        o.write().unwrap()
    }

    fn keeps(data: &[u8]) -> HashMap<String, Keep> {
        let b = object::build::elf::Builder::read(data).unwrap();
        let o = Object::new(&b);
        let k = analyze(&o);
        b.symbols
            .iter()
            .filter(|s| s.st_type() == elf::STT_FUNC)
            .map(|s| {
                let keep = k.get(s.section.unwrap().index(), s.st_value).unwrap();
                (String::from_utf8_lossy(&s.name).into_owned(), keep)
            })
            .collect()
    }

    fn k(entry: u8, exit: u8) -> Keep {
        Keep { entry, exit }
    }

    #[test]
    fn callers_registers_are_kept_and_nothing_else() {
        // leaf touches no vector register; mid keeps xmm2 across its
        // call (as -fipa-ra allows); top calls mid and names none.
        let data = object(
            &[
                func("leaf", &[&[0xb8, 1, 0, 0, 0], &[RET]], &[]),
                func("mid", &[&pxor(2), &call(), &[RET]], &["leaf"]),
                func("top", &[&call(), &[RET]], &["mid"]),
                func("alone", &[&pxor(9), &[RET]], &[]),
            ],
            &[],
        );
        let k = keeps(&data);
        assert_eq!(k["leaf"], Keep { entry: 3, exit: 3 });
        // mid's own xmm2 is dead when it returns; it may read it as an
        // argument at entry.
        assert_eq!(k["mid"], Keep { entry: 3, exit: 0 });
        assert_eq!(k["top"], Keep { entry: 3, exit: 0 });
        // No caller, no callee: nothing.
        assert_eq!(k["alone"], Keep { entry: 0, exit: 0 });
    }

    #[test]
    fn every_register_of_a_caller_counts() {
        for r in 0..16u8 {
            let data = object(
                &[
                    func("leaf", &[&[RET]], &[]),
                    func("caller", &[&pxor(r), &call(), &[RET]], &["leaf"]),
                ],
                &[],
            );
            assert_eq!(keeps(&data)["leaf"], k(r + 1, r + 1), "xmm{r}");
        }
    }

    #[test]
    fn arguments_and_results_of_callees() {
        for r in 0..16u8 {
            // pass names no register; what it calls does.
            let data = object(
                &[
                    func("use", &[&pxor(r), &[RET]], &[]),
                    func("pass", &[&call(), &[RET]], &["use"]),
                ],
                &[],
            );
            // Arguments are xmm0-7, results xmm0-1: a callee's higher
            // registers are its own.
            let entry = if r < 8 { r + 1 } else { 0 };
            let exit = if r < 2 { r + 1 } else { 0 };
            assert_eq!(keeps(&data)["pass"], k(entry, exit), "xmm{r}");
        }
    }

    #[test]
    fn unknown_callees_and_callers() {
        // A call out of the object: every argument and result register.
        let data = object(&[func("out", &[&call(), &[RET]], &["cos"])], &[]);
        assert_eq!(keeps(&data)["out"], k(8, 2));
        // An indirect call (`call rax`): the same.
        let data = object(&[func("ind", &[&[0xff, 0xd0], &[RET]], &[])], &[]);
        assert_eq!(keeps(&data)["ind"], k(8, 2));
        // Code in no function calls f (`call rel32` to f, resolved by the
        // assembler, 16 bytes before it): anything may be live.
        let loose = [0xe8, 11, 0, 0, 0, RET, 0x90, 0x90, 0x90, 0x90, 0x90];
        let data = object(&[func("f", &[&[RET]], &[])], &loose);
        assert_eq!(keeps(&data)["f"], k(16, 16));
    }

    #[test]
    fn registers_the_runtime_cannot_keep() {
        // vpxord zmm1, zmm1, zmm1 in a caller (EVEX): the full save.
        let vpxord = [0x62, 0xf1, 0x75, 0x48, 0xef, 0xc9];
        let data = object(
            &[
                func("leaf", &[&[RET]], &[]),
                func("caller", &[&vpxord, &call(), &[RET]], &["leaf"]),
            ],
            &[],
        );
        assert_eq!(keeps(&data)["leaf"], k(16, 16));
        // vzeroupper in a caller: every register.
        let data = object(
            &[
                func("leaf", &[&[RET]], &[]),
                func("caller", &[&[0xc5, 0xf8, 0x77], &call(), &[RET]], &["leaf"]),
            ],
            &[],
        );
        assert_eq!(keeps(&data)["leaf"], k(16, 16));
    }

    #[test]
    fn recursion_and_chains() {
        // rec calls itself and names xmm5: its own registers are live
        // across its own calls.
        let data = object(&[func("rec", &[&pxor(5), &call(), &[RET]], &["rec"])], &[]);
        assert_eq!(keeps(&data)["rec"], k(6, 6));
        // a -> b -> c -> leaf, only a names xmm4: kept all the way down.
        let data = object(
            &[
                func("leaf", &[&[RET]], &[]),
                func("c", &[&call(), &[RET]], &["leaf"]),
                func("b", &[&call(), &[RET]], &["c"]),
                func("a", &[&pxor(4), &call(), &[RET]], &["b"]),
            ],
            &[],
        );
        let ks = keeps(&data);
        for f in ["leaf", "c", "b"] {
            assert_eq!(ks[f], k(5, 5), "{f}");
        }
    }

    #[test]
    fn callers_keep_nothing_across_a_function_that_calls_out() {
        // top keeps xmm9 across mid (named before and after the call);
        // mid calls leaf, which calls cos (outside): mid clobbers every
        // caller-saved register, so top cannot keep xmm9 across it.
        let data = object(
            &[
                func("leaf", &[&call(), &[RET]], &["cos"]),
                func("mid", &[&call(), &[RET]], &["leaf"]),
                func("top", &[&pxor(9), &call(), &pxor(9), &[RET]], &["mid"]),
            ],
            &[],
        );
        let ks = keeps(&data);
        for f in ["leaf", "mid"] {
            assert_eq!(ks[f], k(8, 2), "{f}");
        }
        // The same with an indirect call in leaf.
        let data = object(
            &[
                func("leaf", &[&[0xff, 0xd0], &[RET]], &[]),
                func("mid", &[&call(), &[RET]], &["leaf"]),
                func("top", &[&pxor(9), &call(), &pxor(9), &[RET]], &["mid"]),
            ],
            &[],
        );
        assert_eq!(keeps(&data)["mid"], k(8, 2));
        // An indirect jump (a jump table) clobbers nothing: xmm9 stays
        // kept at mid's both ends.
        let data = object(
            &[
                func("mid", &[&[0xff, 0xe0], &[RET]], &[]),
                func("top", &[&pxor(9), &call(), &pxor(9), &[RET]], &["mid"]),
            ],
            &[],
        );
        assert_eq!(keeps(&data)["mid"], k(10, 10));
        // A direct call to code no symbol covers (a stripped static
        // function GCC may know the clobbers of): not a call out, xmm9
        // stays kept. mid is at 16, its call's target the loose `ret` at 0.
        let rel = (-21i32).to_le_bytes();
        let data = object(
            &[
                func("mid", &[&[0xe8, rel[0], rel[1], rel[2], rel[3], RET]], &[]),
                func("top", &[&pxor(9), &call(), &pxor(9), &[RET]], &["mid"]),
            ],
            &[RET],
        );
        assert_eq!(keeps(&data)["mid"], k(10, 10));
    }
}
