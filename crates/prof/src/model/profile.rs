//! The profile model: the compact merged counts of a session, keyed by
//! (pid, tid, cpu, mode, image, offset, tag vector, call stack), the stack
//! table, and the tag-vector helpers (hex text form, set bits).
//!
//! A call stack is stored once in [`Profile::stacks`] and rows name it by
//! index, so a session grows with the number of distinct stacks, not with
//! the number of samples. A stack holds the sample's *callers*, nearest
//! first (the leaf is the row's own image and offset); index 0 is the
//! empty stack (no callers known: stacks not recorded, or not stored).
//!
//! Invariant: the sum of all counts fits a u64 (see [`Profile`]).

use super::image::{Image, Mode};
use super::space::{AddressSpaces, Resolved};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Aggregation key of the merged profile.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowKey {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub mode: Mode,
    pub image: u32,
    pub offset: u64,
    pub tags: Vec<u64>,
    /// Index in [`Profile::stacks`] (0: no callers known).
    pub stack: u32,
    /// The cgroup v2 id of the sampled task (0: unknown; a session's
    /// cgroups.tsv names it).
    pub cgroup: u64,
}

/// One frame of a call stack: an image (index in [`Profile::images`])
/// and an offset in it, as a row's leaf. Callers' offsets are return
/// addresses: symbolize `offset - 1` (the call instruction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    pub image: u32,
    pub offset: u64,
}

/// The first value perf uses as a context marker in a callchain
/// (PERF_CONTEXT_MAX = -4095 in include/uapi/linux/perf_event.h): values
/// from here up are markers (kernel, user, guest), not addresses.
pub const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;

/// The addresses of one stack map value: native u64s, leaf first, up to
/// the first zero (the kernel zeroes what follows the last frame); perf's
/// context markers are left out.
pub fn stack_frames(value: &[u8]) -> Vec<u64> {
    value
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .take_while(|&a| a != 0)
        .filter(|&a| a < PERF_CONTEXT_MAX)
        .collect()
}

/// The callers of a sample at `ip`: the kernel stack then the user stack
/// (each leaf first), without the leaf itself when the chain starts with
/// it (it does: both walks store the interrupted ip first).
pub fn callers(ip: u64, kernel: &[u64], user: &[u64]) -> Vec<u64> {
    let mut v: Vec<u64> = kernel.iter().chain(user).copied().collect();
    if v.first() == Some(&ip) {
        v.remove(0);
    }
    v
}

/// The compact merged profile: images, stacks and counts.
///
/// Invariant: the sum of all counts fits a u64. Every count goes in
/// through [`Profile::add_row`], which checks it, so any partial sum a
/// report makes (per symbol, image, component, tag) cannot overflow either.
#[derive(Debug, Default, Clone)]
pub struct Profile {
    pub images: Vec<Image>,
    index: HashMap<Image, u32>,
    /// Call stacks (callers, nearest first); `stacks[0]` is empty.
    stacks: Vec<Vec<Frame>>,
    stack_index: HashMap<Vec<Frame>, u32>,
    counts: HashMap<RowKey, u64>,
    total: u64,
}

/// Adding samples would make the profile's total exceed a u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sample counts overflow 64 bits")]
pub struct CountOverflow;

/// One raw sample as the kernel side aggregated it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawSample {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub mode: Mode,
    pub ip: u64,
    pub tags: Vec<u64>,
    /// The task's cgroup v2 id (0: unknown).
    pub cgroup: u64,
}

impl Profile {
    pub fn image_id(&mut self, img: &Image) -> u32 {
        if let Some(&i) = self.index.get(img) {
            return i;
        }
        let i = self.images.len() as u32;
        self.images.push(img.clone());
        self.index.insert(img.clone(), i);
        i
    }

    /// The index of a stack in the stack table (added if new).
    pub fn stack_id(&mut self, frames: &[Frame]) -> u32 {
        if frames.is_empty() {
            return 0;
        }
        self.ensure_empty_stack();
        if let Some(&i) = self.stack_index.get(frames) {
            return i;
        }
        let i = self.stacks.len() as u32;
        self.stacks.push(frames.to_vec());
        self.stack_index.insert(frames.to_vec(), i);
        i
    }

    fn ensure_empty_stack(&mut self) {
        if self.stacks.is_empty() {
            self.stacks.push(Vec::new());
            self.stack_index.insert(Vec::new(), 0);
        }
    }

    /// The stack table (index 0: the empty stack).
    pub fn stacks(&self) -> &[Vec<Frame>] {
        if self.stacks.is_empty() {
            &[]
        } else {
            &self.stacks
        }
    }

    /// A row's callers (empty for stack 0 or an index out of the table,
    /// which the session parser refuses before it gets here).
    pub fn stack(&self, id: u32) -> &[Frame] {
        self.stacks
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Resolves the callers' addresses of a sample of process `pid`
    /// (kernel addresses to the kernel, others in the process's space;
    /// `fill` completes each resolution as the leaf's is, e.g. with a
    /// build ID) and returns the stack's index.
    pub fn add_stack(
        &mut self,
        spaces: &AddressSpaces,
        pid: u32,
        callers: &[u64],
        fill: &mut dyn FnMut(&mut Resolved),
    ) -> u32 {
        let frames: Vec<Frame> = callers
            .iter()
            .map(|&a| {
                let mode = if a >= 0xffff_8000_0000_0000 {
                    Mode::Kernel
                } else {
                    Mode::User
                };
                let mut r = spaces.resolve(pid, a, mode);
                fill(&mut r);
                Frame {
                    image: self.image_id(&r.image),
                    offset: r.offset,
                }
            })
            .collect();
        self.stack_id(&frames)
    }

    /// Adds `count` samples of one raw key, resolved now.
    pub fn add(
        &mut self,
        spaces: &AddressSpaces,
        s: &RawSample,
        count: u64,
    ) -> Result<(), CountOverflow> {
        self.add_resolved(s, &spaces.resolve(s.pid, s.ip, s.mode), 0, count)
    }

    /// Adds `count` samples of one raw key already resolved, with its
    /// stack (an index from [`Profile::stack_id`], 0 for none).
    pub fn add_resolved(
        &mut self,
        s: &RawSample,
        r: &Resolved,
        stack: u32,
        count: u64,
    ) -> Result<(), CountOverflow> {
        let image = self.image_id(&r.image);
        self.add_row(
            RowKey {
                pid: s.pid,
                tid: s.tid,
                cpu: s.cpu,
                mode: s.mode,
                image,
                offset: r.offset,
                tags: s.tags.clone(),
                stack,
                cgroup: s.cgroup,
            },
            count,
        )
    }

    /// Adds `count` samples to a row (rows with equal keys merge). Nothing
    /// changes when the total would overflow.
    pub fn add_row(&mut self, k: RowKey, count: u64) -> Result<(), CountOverflow> {
        let total = self.total.checked_add(count).ok_or(CountOverflow)?;
        // a row's count is part of the total, so it cannot overflow either
        *self.counts.entry(k).or_insert(0) += count;
        self.total = total;
        Ok(())
    }

    /// The sum of all counts.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The rows and their counts.
    pub fn counts(&self) -> &HashMap<RowKey, u64> {
        &self.counts
    }

    /// Takes every row out (the images stay), e.g. to re-add them under
    /// other keys.
    pub fn take_rows(&mut self) -> HashMap<RowKey, u64> {
        self.total = 0;
        std::mem::take(&mut self.counts)
    }

    /// Rows sorted by key, for a stable file.
    pub fn sorted_rows(&self) -> Vec<(&RowKey, u64)> {
        let mut v: Vec<_> = self.counts.iter().map(|(k, c)| (k, *c)).collect();
        v.sort();
        v
    }

    /// Restores the image index after images were read from disk.
    pub fn with_images(images: Vec<Image>) -> Profile {
        let index = images
            .iter()
            .enumerate()
            .map(|(i, im)| (im.clone(), i as u32))
            .collect();
        Profile {
            images,
            index,
            counts: HashMap::new(),
            total: 0,
            stacks: Vec::new(),
            stack_index: HashMap::new(),
        }
    }

    /// Restores the stack table after it was read from disk (`stacks[0]`
    /// must be the empty stack; the parser makes it so).
    pub fn set_stacks(&mut self, stacks: Vec<Vec<Frame>>) {
        self.stack_index = stacks
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), i as u32))
            .collect();
        self.stacks = stacks;
    }
}

/// Tag vector words as one hex string, most significant word first
/// ("0" when empty).
pub fn tags_hex(tags: &[u64]) -> String {
    let mut s = String::new();
    for (i, w) in tags.iter().rev().enumerate() {
        if i == 0 {
            let _ = write!(s, "{w:x}");
        } else {
            let _ = write!(s, "{w:016x}");
        }
    }
    let t = s.trim_start_matches('0');
    if t.is_empty() {
        "0".into()
    } else {
        t.to_string()
    }
}

/// Inverse of [`tags_hex`] for a vector of `words` words; None unless
/// `s` is hex digits only (no sign, no space) and fits.
pub fn parse_tags_hex(s: &str, words: usize) -> Option<Vec<u64>> {
    let mut out = vec![0u64; words];
    // ASCII only: the slicing below is by bytes
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let n = s.len();
    for (i, w) in out.iter_mut().enumerate() {
        let end = n.checked_sub(16 * i);
        let Some(end) = end else { break };
        if end == 0 {
            break;
        }
        let start = end.saturating_sub(16);
        *w = u64::from_str_radix(&s[start..end], 16).ok()?;
    }
    if n > 16 * words && !s[..n - 16 * words].trim_start_matches('0').is_empty() {
        return None;
    }
    Some(out)
}

/// Bits set in a tag vector.
pub fn tag_bits(tags: &[u64]) -> Vec<u32> {
    let mut v = Vec::new();
    for (w, word) in tags.iter().enumerate() {
        for b in 0..64 {
            if word & (1u64 << b) != 0 {
                v.push((w * 64 + b) as u32);
            }
        }
    }
    v
}
