//! Trace and span ids that every machine computes alike, from what its
//! own records say: a span's id must be known to the exporter of a child
//! on another machine, which never sees the parent's record. Pure.
//!
//! The hash is FNV-1a (64 bits) over the fields, each preceded by its
//! length, finished by splitmix64's mixer: fixed here, so that two builds
//! of mantle (and two machines) agree, which `std`'s hasher does not
//! promise. Ids are not secrets; a zero id (invalid in OTLP) is replaced.

/// A 64-bit hash of `parts` with `seed`.
pub fn hash64(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    let mut eat = |b: u8| {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    for p in parts {
        for b in (p.len() as u64).to_le_bytes() {
            eat(b);
        }
        for &b in *p {
            eat(b);
        }
    }
    // splitmix64's finalizer: FNV's low bits are weak
    let mut z = h;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An 8-byte span id of `parts` (never all zero).
pub fn span_id(parts: &[&[u8]]) -> [u8; 8] {
    let h = hash64(0x5350_414e, parts).max(1);
    h.to_be_bytes()
}

/// A 16-byte trace id of `parts` (never all zero).
pub fn trace_id(parts: &[&[u8]]) -> [u8; 16] {
    let a = hash64(0x5452_4143_4531, parts);
    let b = hash64(0x5452_4143_4532, parts).max(1);
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&a.to_be_bytes());
    id[8..].copy_from_slice(&b.to_be_bytes());
    id
}

/// Lower-case hex, as Jaeger's API and the OTLP JSON encoding write ids.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED: u64 = 10_460_761_397_880_250_168;

    /// Fixed values: a change of the hash splits traces between machines
    /// that run different builds, so it must be deliberate.
    #[test]
    fn ids_are_stable_and_length_prefixed() {
        assert_eq!(hex(&span_id(&[b"a", b"bc"])), hex(&span_id(&[b"a", b"bc"])));
        assert_ne!(span_id(&[b"ab", b"c"]), span_id(&[b"a", b"bc"]));
        assert_ne!(trace_id(&[b"x"]), trace_id(&[b"y"]));
        assert_eq!(hash64(0, &[]), hash64(0, &[]));
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(hash64(1, &[b"mantle"]), PINNED);
    }
}
