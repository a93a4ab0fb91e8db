//! DWARF unwinding of copied user stacks (`--stacks dwarf`), the way
//! `perf record --call-graph dwarf` does it: each sample carries the
//! user registers (`PERF_SAMPLE_REGS_USER`: ip, sp, bp) and a copy of the
//! top of the user stack (`PERF_SAMPLE_STACK_USER`, [`STACK_COPY`]
//! bytes from sp up); user space unwinds it with the `.eh_frame` call
//! frame information of each mapped ELF file (framehop, samply's
//! unwinder, over gimli) when the sample is replayed, so against the
//! address space as it was at that moment, and the resulting stack is
//! merged into the profile like a frame-pointer stack: the session keeps
//! counts per distinct stack, not the copied bytes.
//!
//! Why: Debian's `-O2` programs and libraries (glibc included) are built
//! without frame pointers, so a frame-pointer walk loses the callers of
//! any frame of such code (docs/prof.md, "Call stacks"). `.eh_frame` is
//! in every x86-64 ELF file (the C++ and Rust unwinders need it), so this
//! works on unmodified binaries, at the price of copying 8 KiB per sample
//! in the sample interrupt and unwinding in user space
//! (bench/prof/HISTORY.md, "DWARF unwinding", measures both).
//!
//! What is lost: frames above the copied slice (a stack deeper than
//! [`STACK_COPY`] bytes ends early; the sample counts for the functions
//! it reached), and code without CFI (JIT code, hand-written assembly
//! without directives), where framehop falls back to the frame pointer.
//!
//! Invariants: a sample record is input from the kernel's ring, parsed
//! with checked offsets only (a short or inconsistent one is `None`,
//! counted by the caller); stack reads outside the copied slice fail
//! (the unwind stops there), never read other memory; ELF files are
//! opened as regular files only ([`crate::files`]), read once per path,
//! and a file that does not parse gives no module (its frames fall back
//! to frame pointers), never a panic.

use crate::files;
use crate::model::AddressSpaces;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Bytes of user stack copied per sample by default: perf's default for
/// `--call-graph dwarf` (tools/perf/util/callchain.c, 8192).
pub const STACK_COPY: u32 = 8192;

/// The stack copy sizes `--stack-size` takes: multiples of 8 (the
/// kernel's rule for `sample_stack_user`) from 512 bytes to 56 KiB (a
/// sample record's size is a u16: 64 KiB with the callchain and the
/// registers).
pub const STACK_COPY_RANGE: std::ops::RangeInclusive<u32> = 512..=57344;

/// Whether `--stack-size` may be `n` ([`STACK_COPY_RANGE`], multiple of 8).
pub fn stack_copy_ok(n: u32) -> bool {
    STACK_COPY_RANGE.contains(&n) && n.is_multiple_of(8)
}

/// The user registers asked for (bit numbers of `sample_regs_user`): bp,
/// sp and ip, the three an x86-64 unwinder uses (framehop recovers only
/// these). The kernel writes them in bit order.
pub const REGS_MASK: u64 = (1 << mantle_sys::perf::PERF_REG_X86_BP)
    | (1 << mantle_sys::perf::PERF_REG_X86_SP)
    | (1 << mantle_sys::perf::PERF_REG_X86_IP);

/// Largest unwind section read.
const SECTION_LIMIT: u64 = 256 << 20;

/// The user registers of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// One PERF_RECORD_SAMPLE of a `--stacks dwarf` event, whose sample_type
/// is IP | TID | TIME | CPU | CALLCHAIN | REGS_USER | STACK_USER (the
/// order of the fields in the record, perf_event_open(2)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DwarfSample<'a> {
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
    /// The kernel callchain (exclude_callchain_user), context markers
    /// left out; empty for user-mode samples.
    pub kernel: Vec<u64>,
    /// The user registers; None for a kernel thread (ABI_NONE).
    pub regs: Option<UserRegs>,
    /// The copied stack, from `regs.sp` up (its `dyn_size` bytes).
    pub stack: &'a [u8],
    /// The offset just past the fields parsed: where a field asked for
    /// after them starts (PERF_SAMPLE_CGROUP, [`sample_cgroup`]).
    pub end: usize,
}

/// The PERF_SAMPLE_CGROUP field of a sample record parsed as `s` (the
/// u64 right after the fields [`parse_sample`] and [`parse_chain_sample`]
/// read: it follows them in the kernel's order of fields, and mantle asks
/// for no field after it). None when the record is too short.
pub fn sample_cgroup(b: &[u8], s: &DwarfSample) -> Option<u64> {
    u64_at(b, s.end)
}

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        b.get(o..o.checked_add(8)?)?.try_into().ok()?,
    ))
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(o..o.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// Parses a sample record's body (after the 8-byte header). None when it
/// is too short for its fields or its sizes do not add up.
pub fn parse_sample(b: &[u8]) -> Option<DwarfSample<'_>> {
    let ip = u64_at(b, 0)?;
    let (pid, tid) = (u32_at(b, 8)?, u32_at(b, 12)?);
    let time = u64_at(b, 16)?;
    let cpu = u32_at(b, 24)?;
    let nr = usize::try_from(u64_at(b, 32)?).ok()?;
    let mut o: usize = 40;
    let chain_end = nr.checked_mul(8)?.checked_add(o)?;
    let chain = b.get(o..chain_end)?;
    let kernel = crate::model::stack_frames(chain);
    o = chain_end;
    let abi = u64_at(b, o)?;
    o += 8;
    let regs = if abi == mantle_sys::perf::PERF_SAMPLE_REGS_ABI_NONE {
        None
    } else {
        // three registers, in bit order: bp (6), sp (7), ip (8)
        let r = UserRegs {
            bp: u64_at(b, o)?,
            sp: u64_at(b, o + 8)?,
            ip: u64_at(b, o + 16)?,
        };
        o += 24;
        Some(r)
    };
    let size = usize::try_from(u64_at(b, o)?).ok()?;
    o += 8;
    let stack = if size == 0 {
        &[][..]
    } else {
        let data = b.get(o..o.checked_add(size)?)?;
        let dyn_size = usize::try_from(u64_at(b, o + size)?).ok()?;
        o += size + 8;
        data.get(..dyn_size)?
    };
    Some(DwarfSample {
        ip,
        pid,
        tid,
        time,
        cpu,
        kernel,
        regs,
        stack,
        end: o,
    })
}

/// Parses a sample record of the perf-ring path without a stack copy
/// (sample_type IP, TID, TIME, CPU, and CALLCHAIN when `callchain`): what
/// an unprivileged recording takes. The whole callchain, user frames
/// included (frame pointers, walked by the perf core), is in `kernel`
/// (context markers left out); no registers, no stack. None when the
/// record is too short for its fields.
pub fn parse_chain_sample(b: &[u8], callchain: bool) -> Option<DwarfSample<'_>> {
    let ip = u64_at(b, 0)?;
    let (pid, tid) = (u32_at(b, 8)?, u32_at(b, 12)?);
    let time = u64_at(b, 16)?;
    let cpu = u32_at(b, 24)?;
    let mut end = 32;
    let kernel = if callchain {
        let nr = usize::try_from(u64_at(b, 32)?).ok()?;
        end = nr.checked_mul(8)?.checked_add(40)?;
        crate::model::stack_frames(b.get(40..end)?)
    } else {
        Vec::new()
    };
    Some(DwarfSample {
        ip,
        pid,
        tid,
        time,
        cpu,
        kernel,
        regs: None,
        stack: &[],
        end,
    })
}

/// The unwind tables of one ELF file and its loadable segments.
struct ElfUnwind {
    sections: ExplicitModuleSectionInfo<Arc<[u8]>>,
    /// (p_offset, p_vaddr, p_filesz, executable) of every PT_LOAD segment.
    segments: Vec<(u64, u64, u64, bool)>,
}

/// A section's address range.
fn range<'d, R: object::ReadRef<'d>>(
    f: &object::File<'d, R>,
    name: &str,
) -> Option<std::ops::Range<u64>> {
    let s = f.section_by_name(name)?;
    s.address().checked_add(s.size()).map(|e| s.address()..e)
}

/// A section's address range and a copy of its bytes (at most
/// [`SECTION_LIMIT`]).
fn section<'d, R: object::ReadRef<'d>>(
    f: &object::File<'d, R>,
    name: &str,
) -> (Option<std::ops::Range<u64>>, Option<Arc<[u8]>>) {
    let data = f
        .section_by_name(name)
        .filter(|s| s.size() <= SECTION_LIMIT)
        .and_then(|s| s.data().ok().map(Arc::from));
    (range(f, name), data)
}

/// p_flags' execute bit.
const PF_X: u32 = 1;

impl ElfUnwind {
    /// Reads the headers and the unwind sections of an ELF file, not the
    /// whole file (a debug build's executable is hundreds of megabytes,
    /// and the recorder reads it while samples wait in the rings).
    fn read(path: &Path) -> Option<ElfUnwind> {
        let cache = object::ReadCache::new(files::open_regular(path).ok()?);
        Self::parse(&object::File::parse(&cache).ok()?)
    }

    /// The unwind tables of an ELF image in memory (the vDSO).
    pub fn from_bytes(image: &[u8]) -> Option<ElfUnwind> {
        Self::parse(&object::File::parse(image).ok()?)
    }

    fn parse<'d, R: object::ReadRef<'d>>(f: &object::File<'d, R>) -> Option<ElfUnwind> {
        // .text's address range only: framehop reads code bytes for
        // macOS's compact unwind info, never for .eh_frame, and keeping
        // every mapped library's code would cost megabytes each
        let text_svma = range(f, ".text");
        let got_svma = range(f, ".got");
        let (eh_frame_svma, eh_frame) = section(f, ".eh_frame");
        let (eh_frame_hdr_svma, eh_frame_hdr) = section(f, ".eh_frame_hdr");
        let (_, debug_frame) = section(f, ".debug_frame");
        if eh_frame.is_none() && debug_frame.is_none() {
            return None;
        }
        let segments = f
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                let x = matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & PF_X != 0);
                (off, s.address(), size, x)
            })
            .collect();
        Some(ElfUnwind {
            sections: ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma,
                got_svma,
                eh_frame_svma,
                eh_frame,
                eh_frame_hdr_svma,
                eh_frame_hdr,
                debug_frame,
                ..Default::default()
            },
            segments,
        })
    }

    /// The load bias of an executable mapping of this file at `start`
    /// from file offset `pgoff`: the segment holding `pgoff` says which
    /// virtual address that offset has in the file. An executable segment
    /// is preferred: where segments are not page-aligned in the file, the
    /// page-aligned `pgoff` of the text lies inside the segment before it.
    fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let holds = |&&(off, _, size, _): &&(u64, u64, u64, bool)| {
            pgoff >= (off & !0xfff) && pgoff < off.saturating_add(size)
        };
        let &(off, vaddr, _, _) = self
            .segments
            .iter()
            .filter(|s| s.3)
            .find(holds)
            .or_else(|| self.segments.iter().find(holds))?;
        // vaddr of file offset pgoff = vaddr - off + pgoff (congruent mod
        // the page size, so exact for the page-aligned mapping start)
        Some(start.wrapping_sub(vaddr.wrapping_sub(off).wrapping_add(pgoff)))
    }
}

/// Counters of the unwinding.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UnwindStats {
    /// User stacks unwound.
    pub stacks: u64,
    /// Of which ended before the stack's end was recognized (an error of
    /// the unwinder, a read past the copied slice, or no module).
    pub truncated: u64,
    /// Samples without user registers (kernel threads).
    pub no_user: u64,
}

/// framehop's x86-64 unwinder over shared section bytes.
type Unwinder64 = UnwinderX86_64<Arc<[u8]>>;

/// Unwinders per process, built from the process's mappings and rebuilt
/// when they change ([`crate::model::Process::generation`]).
#[derive(Default)]
pub struct Unwinders {
    files: HashMap<String, Option<Arc<ElfUnwind>>>,
    procs: HashMap<u32, (u64, Unwinder64)>,
    cache: Option<Box<CacheX86_64>>,
    /// The vDSO's tables (this process's copy: one vDSO per kernel), read
    /// on first use; `Some(None)` when it has none.
    vdso: Option<Option<Arc<ElfUnwind>>>,
    pub stats: UnwindStats,
}

/// Unwinders kept before those of exited processes are dropped.
const PRUNE_AT: usize = 1024;

/// Most frames kept of one user stack (as the stack table allows).
const MAX_FRAMES: usize = 1024;

impl Unwinders {
    fn unwinder(&mut self, sp: &AddressSpaces, pid: u32) -> Option<&Unwinder64> {
        let p = sp.procs.get(&pid)?;
        let stale = self
            .procs
            .get(&pid)
            .is_none_or(|(g, _)| *g != p.generation());
        if stale {
            if self.procs.len() >= PRUNE_AT {
                // a build starts thousands of short processes: the
                // unwinders of those that exited are not needed again
                // (their samples came before their EXIT, in time order)
                self.procs
                    .retain(|pid, _| sp.procs.get(pid).is_some_and(|p| !p.exited));
            }
            let mut u = UnwinderX86_64::new();
            for m in p.maps() {
                let elf = if m.path == crate::model::VDSO_IMAGE {
                    // the vDSO has CFI too (clock_gettime's callers)
                    self.vdso.get_or_insert_with(|| {
                        let image = mantle_sys::os::vdso_image()?;
                        ElfUnwind::from_bytes(&image).map(Arc::new)
                    })
                } else if m.path.starts_with('/') {
                    self.files
                        .entry(m.path.clone())
                        .or_insert_with(|| ElfUnwind::read(Path::new(&m.path)).map(Arc::new))
                } else {
                    continue;
                };
                let Some(elf) = elf else { continue };
                let Some(bias) = elf.bias(m.start, m.pgoff) else {
                    continue;
                };
                u.add_module(Module::new(
                    m.path.clone(),
                    m.start..m.end,
                    bias,
                    elf.sections.clone(),
                ));
            }
            self.procs.insert(pid, (p.generation(), u));
        }
        self.procs.get(&pid).map(|(_, u)| u)
    }

    /// The user stack of a sample of `pid`: its ip first, then the
    /// return addresses, nearest first (as a frame-pointer walk gives
    /// them). Empty without user registers.
    pub fn unwind(&mut self, sp: &AddressSpaces, pid: u32, s: &DwarfSample) -> Vec<u64> {
        let Some(r) = s.regs else {
            self.stats.no_user += 1;
            return Vec::new();
        };
        self.stats.stacks += 1;
        let cache = self
            .cache
            .take()
            .unwrap_or_else(|| Box::new(CacheX86_64::new()));
        let mut cache = cache;
        let mut out = Vec::new();
        let complete = match self.unwinder(sp, pid) {
            Some(u) => walk(u, &mut cache, r, s.stack, &mut out),
            None => {
                out.push(r.ip);
                false
            }
        };
        if !complete {
            self.stats.truncated += 1;
        }
        self.cache = Some(cache);
        out
    }
}

/// Walks one stack; true when it reached the stack's recognized end.
fn walk(
    u: &Unwinder64,
    cache: &mut CacheX86_64,
    r: UserRegs,
    stack: &[u8],
    out: &mut Vec<u64>,
) -> bool {
    let base = r.sp;
    let mut read = |addr: u64| -> Result<u64, ()> {
        let off = usize::try_from(addr.checked_sub(base).ok_or(())?).map_err(|_| ())?;
        u64_at(stack, off).ok_or(())
    };
    let mut it = u.iter_frames(
        r.ip,
        UnwindRegsX86_64::new(r.ip, r.sp, r.bp),
        cache,
        &mut read,
    );
    loop {
        match it.next() {
            Ok(Some(f)) => {
                if out.len() >= MAX_FRAMES {
                    return false;
                }
                out.push(f.address());
            }
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(kernel: &[u64], regs: Option<[u64; 3]>, stack: &[u8], dyn_size: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(0x401000u64.to_ne_bytes());
        b.extend(7u32.to_ne_bytes());
        b.extend(8u32.to_ne_bytes());
        b.extend(99u64.to_ne_bytes());
        b.extend(1u32.to_ne_bytes());
        b.extend(0u32.to_ne_bytes());
        b.extend((kernel.len() as u64).to_ne_bytes());
        for k in kernel {
            b.extend(k.to_ne_bytes());
        }
        match regs {
            Some(r) => {
                b.extend(2u64.to_ne_bytes());
                for x in r {
                    b.extend(x.to_ne_bytes());
                }
            }
            None => b.extend(0u64.to_ne_bytes()),
        }
        b.extend((stack.len() as u64).to_ne_bytes());
        b.extend(stack);
        if !stack.is_empty() {
            b.extend(dyn_size.to_ne_bytes());
        }
        b
    }

    /// Every size around the range's edges and every residue mod 8.
    #[test]
    fn stack_copy_sizes() {
        for n in 0..=70_000u32 {
            let want = (512..=57344).contains(&n) && n % 8 == 0;
            assert_eq!(stack_copy_ok(n), want, "{n}");
        }
        assert!(stack_copy_ok(STACK_COPY));
    }

    #[test]
    fn sample_fields_parse() {
        let marker = crate::model::PERF_CONTEXT_MAX;
        let b = body(
            &[marker, 0xffff_ffff_8100_0000],
            Some([1, 2, 3]),
            &[5; 16],
            8,
        );
        let s = parse_sample(&b).unwrap();
        assert_eq!((s.ip, s.pid, s.tid, s.time, s.cpu), (0x401000, 7, 8, 99, 1));
        assert_eq!(s.kernel, [0xffff_ffff_8100_0000]);
        assert_eq!(
            s.regs,
            Some(UserRegs {
                bp: 1,
                sp: 2,
                ip: 3
            })
        );
        assert_eq!(s.stack, &[5; 8]);
        // PERF_SAMPLE_CGROUP after the stack copy
        assert_eq!(sample_cgroup(&b, &s), None);
        let mut with = b.clone();
        with.extend(0x1234u64.to_ne_bytes());
        let s = parse_sample(&with).unwrap();
        assert_eq!(sample_cgroup(&with, &s), Some(0x1234));
        // a kernel thread: no registers, no stack
        let b = body(&[], None, &[], 0);
        let s = parse_sample(&b).unwrap();
        assert_eq!((s.regs, s.stack.len()), (None, 0));
        let mut with = b.clone();
        with.extend(77u64.to_ne_bytes());
        let s = parse_sample(&with).unwrap();
        assert_eq!(sample_cgroup(&with, &s), Some(77));
    }

    /// Every truncation of a valid record, and a dyn_size or a callchain
    /// length past the record, is None: never a panic.
    #[test]
    fn short_or_inconsistent_samples_are_refused() {
        let b = body(&[0xffff_ffff_8100_0000], Some([1, 2, 3]), &[5; 16], 16);
        assert!(parse_sample(&b).is_some());
        for len in 0..b.len() {
            assert!(parse_sample(&b[..len]).is_none(), "length {len}");
        }
        let too_big = body(&[], Some([1, 2, 3]), &[5; 16], 17);
        assert!(parse_sample(&too_big).is_none());
        let mut huge_chain = b.clone();
        huge_chain[32..40].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(parse_sample(&huge_chain).is_none());
    }

    /// The perf-ring layout of an unprivileged recording (no registers, no
    /// stack copy): the user callchain's frames without the marker; every
    /// truncation refused; without CALLCHAIN the record stops at the CPU.
    #[test]
    fn chain_samples_parse() {
        let marker = crate::model::PERF_CONTEXT_MAX + 1;
        let mut b = Vec::new();
        b.extend(0x401000u64.to_ne_bytes());
        b.extend(7u32.to_ne_bytes());
        b.extend(8u32.to_ne_bytes());
        b.extend(99u64.to_ne_bytes());
        b.extend(1u32.to_ne_bytes());
        b.extend(0u32.to_ne_bytes());
        let flat = b.clone();
        b.extend(3u64.to_ne_bytes());
        for f in [marker, 0x401000, 0x402000] {
            b.extend(f.to_ne_bytes());
        }
        let s = parse_chain_sample(&b, true).unwrap();
        assert_eq!((s.ip, s.pid, s.tid, s.time, s.cpu), (0x401000, 7, 8, 99, 1));
        assert_eq!(s.kernel, [0x401000, 0x402000]);
        assert_eq!((s.regs, s.stack.len()), (None, 0));
        for len in 0..b.len() {
            assert!(parse_chain_sample(&b[..len], true).is_none(), "{len}");
        }
        let mut with = b.clone();
        with.extend(5u64.to_ne_bytes());
        let s = parse_chain_sample(&with, true).unwrap();
        assert_eq!(sample_cgroup(&with, &s), Some(5));
        let s = parse_chain_sample(&flat, false).unwrap();
        assert!(s.kernel.is_empty());
        let mut with = flat.clone();
        with.extend(6u64.to_ne_bytes());
        let s = parse_chain_sample(&with, false).unwrap();
        assert_eq!(sample_cgroup(&with, &s), Some(6));
        assert!(parse_chain_sample(&flat[..27], false).is_none());
        let mut huge = b.clone();
        huge[32..40].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(parse_chain_sample(&huge, true).is_none());
    }

    /// The bias of a mapping: a PIE's text segment at vaddr 0x1000, file
    /// offset 0x1000, mapped at 0x5555_5555_5000 from pgoff 0x1000.
    #[test]
    fn bias_from_the_segment_holding_pgoff() {
        let e = ElfUnwind {
            sections: ExplicitModuleSectionInfo::default(),
            segments: vec![
                (0, 0, 0x800, false),
                (0x1000, 0x1000, 0x2000, true),
                (0x2e10, 0x3e10, 0x200, false),
            ],
        };
        assert_eq!(e.bias(0x5555_5555_5000, 0x1000), Some(0x5555_5555_4000));
        // a non-PIE executable: vaddr 0x401000 at offset 0x1000, no bias
        let e = ElfUnwind {
            sections: ExplicitModuleSectionInfo::default(),
            segments: vec![(0x1000, 0x401000, 0x2000, true)],
        };
        assert_eq!(e.bias(0x401000, 0x1000), Some(0));
        assert_eq!(e.bias(0x401000, 0x9000), None);
        // segments not page-aligned in the file: read-only data up to
        // 0x1a10, text from 0x1a10 (vaddr 0x2a10); the text mapping starts
        // at pgoff 0x1000, inside the data segment too: the text counts
        let e = ElfUnwind {
            sections: ExplicitModuleSectionInfo::default(),
            segments: vec![(0, 0, 0x1a10, false), (0x1a10, 0x2a10, 0x3000, true)],
        };
        assert_eq!(e.bias(0x7f00_0000_2000, 0x1000), Some(0x7f00_0000_0000));
    }
}
