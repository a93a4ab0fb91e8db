//! The profile model: the compact merged counts of a session, keyed by
//! (pid, tid, cpu, mode, image, offset, tag vector), and the tag-vector
//! helpers (hex text form, set bits).
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
}

/// The compact merged profile: images and counts.
///
/// Invariant: the sum of all counts fits a u64. Every count goes in
/// through [`Profile::add_row`], which checks it, so any partial sum a
/// report makes (per symbol, image, component, tag) cannot overflow either.
#[derive(Debug, Default, Clone)]
pub struct Profile {
    pub images: Vec<Image>,
    index: HashMap<Image, u32>,
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

    /// Adds `count` samples of one raw key, resolved now.
    pub fn add(
        &mut self,
        spaces: &AddressSpaces,
        s: &RawSample,
        count: u64,
    ) -> Result<(), CountOverflow> {
        self.add_resolved(s, &spaces.resolve(s.pid, s.ip, s.mode), count)
    }

    /// Adds `count` samples of one raw key already resolved.
    pub fn add_resolved(
        &mut self,
        s: &RawSample,
        r: &Resolved,
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
        }
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
