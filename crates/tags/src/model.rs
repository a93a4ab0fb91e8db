//! The pure core of tags: validation of names and settings, the lifeline
//! region allocator, and a reference model of the propagation rules that
//! the kernel side implements (mTags, seeds/000, sections 2-3). No system
//! calls here; everything is unit-tested on any host. The propagation
//! model ([`Thread`]) is also the oracle of a differential test, which runs
//! one scenario on the real kernel side and on the model and compares every
//! holder and TTL after each step (crates/cli/tests/tags.rs,
//! `kernel_side_agrees_with_the_reference_model`).

use crate::abi::{MT_LIFELINE_SLOTS, MT_NAME_LEN, MT_TAGS, MT_TTL_INF};
use std::collections::BTreeMap;

/// Why a tag name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("tag name is empty")]
    Empty,
    #[error("tag name {0:?} is longer than {max} bytes", max = MT_NAME_LEN - 1)]
    TooLong(String),
    #[error("tag name {0:?} has a character outside [A-Za-z0-9_.:-] (or starts with '-')")]
    BadChar(String),
}

/// A tag name is 1..=31 printable bytes from a conservative set, so that
/// it is safe in shells, file names, JSON and trace formats.
pub fn validate_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MT_NAME_LEN - 1 {
        return Err(NameError::TooLong(name.to_string()));
    }
    let ok = name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-'));
    if !ok || name.starts_with('-') {
        return Err(NameError::BadChar(name.to_string()));
    }
    Ok(())
}

/// A TTL as users give it: a number of hops 0..=254, or "inf".
pub fn parse_ttl(s: &str) -> Result<u8, String> {
    if s == "inf" || s == "infinite" {
        return Ok(MT_TTL_INF as u8);
    }
    match s.parse::<u32>() {
        Ok(n) if n < MT_TTL_INF as u32 => Ok(n as u8),
        _ => Err(format!(
            "TTL {s:?} must be a hop count from 0 to {} or 'inf'",
            MT_TTL_INF - 1
        )),
    }
}

/// A duration as users give it: `500ms`, `2s`, `1m`, or plain
/// milliseconds; 1 ms to one day.
pub fn parse_duration_ms(s: &str) -> Result<u32, String> {
    let d = mantle_units::parse_duration(s).map_err(|e| e.to_string())?;
    if d < std::time::Duration::from_millis(1) || d > std::time::Duration::from_secs(86_400) {
        return Err(format!("duration {s:?} must be from 1ms to 24h"));
    }
    // whole milliseconds (the kernel timer's unit here), at least 1
    Ok(d.as_millis().max(1) as u32)
}

/// The lifeline ring of each global tag (cluster table): the global tags
/// take at most half of the shared pool (16 x 2048 = 32768 of 65536
/// records), so local tags always have the other half (issue 32: 16 tags
/// of 4096 took the whole pool, and `tag create X --lifeline 8` failed).
pub const GLOBAL_LIFELINE: u32 = (MT_LIFELINE_SLOTS / 2 / crate::abi::MT_GLOBAL_BITS) as u32;

/// First-fit allocation of a lifeline ring of `want` slots out of the
/// shared MT_LIFELINE_SLOTS, given the (base, size) regions in use.
pub fn alloc_lifeline(used: &[(u32, u32)], want: u32) -> Option<u32> {
    if want == 0 || want as usize > MT_LIFELINE_SLOTS {
        return None;
    }
    let mut regions: Vec<(u32, u32)> = used.iter().copied().filter(|r| r.1 > 0).collect();
    regions.sort();
    let mut at = 0u32;
    for (base, size) in regions {
        if base >= at && base - at >= want {
            return Some(at);
        }
        at = at.max(base + size);
    }
    (MT_LIFELINE_SLOTS as u32 - at >= want).then_some(at)
}

/// Reference model of one thread's tag state, mirroring `struct mt_thread`
/// plus its view vector, with the same rules as tags.bpf.c `deliver()`
/// (checked against it by the differential test named in the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Thread {
    pub system: bool,
    /// held tag -> TTL
    pub held: BTreeMap<u32, u8>,
    pub terminators: Vec<u32>,
}

/// Per-tag facts the rules need.
#[derive(Clone, Debug, Default)]
pub struct TagInfo {
    pub system: bool,
}

impl Thread {
    /// The tags this thread passes on with a request, with the TTL the
    /// receiver will hold (already decremented): held tags with TTL > 0.
    pub fn outgoing(&self) -> BTreeMap<u32, u8> {
        self.held
            .iter()
            .filter(|(_, &ttl)| ttl > 0)
            .map(|(&t, &ttl)| {
                (
                    t,
                    if ttl == MT_TTL_INF as u8 {
                        ttl
                    } else {
                        ttl - 1
                    },
                )
            })
            .collect()
    }

    /// Receive a request carrying `msg` (as made by `outgoing`). Returns the
    /// tags actually taken. Terminators and classes reject; a tag already
    /// held keeps the larger TTL.
    pub fn receive(&mut self, msg: &BTreeMap<u32, u8>, tags: &BTreeMap<u32, TagInfo>) -> Vec<u32> {
        let mut taken = Vec::new();
        for (&t, &ttl) in msg {
            let Some(info) = tags.get(&t) else { continue };
            if self.terminators.contains(&t) || info.system != self.system {
                continue;
            }
            let e = self.held.entry(t).or_insert(ttl);
            if ttl > *e {
                *e = ttl;
            }
            taken.push(t);
        }
        taken
    }
}

/// A global tag from the cluster table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalTag {
    pub name: String,
    pub ttl: Option<u8>,
    pub system: bool,
    /// A deadlock tag (marks call chains across machines).
    pub deadlock: bool,
}

/// The cluster table: the global tags every machine of a cluster loads, in
/// bit order, and a 16-bit digest of it that travels in every TCP option so
/// that a machine with a different table drops the tags rather than
/// misreading them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTable {
    pub tags: Vec<GlobalTag>,
    pub digest: u16,
}

/// Parses a cluster table: one tag per line, `NAME [ttl=N|inf] [system] [deadlock]`;
/// `#` starts a comment. Tag i of the file gets bit i (the global range).
pub fn parse_cluster(text: &str) -> Result<ClusterTable, String> {
    let mut tags: Vec<GlobalTag> = Vec::new();
    let mut canon = String::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default().to_string();
        validate_name(&name).map_err(|e| format!("line {}: {e}", n + 1))?;
        // Refuse at the first tag too many, before the duplicate check
        // below, which is quadratic: a wrong file (a word list) used to take
        // minutes to be refused.
        if tags.len() == crate::abi::MT_GLOBAL_BITS {
            return Err(format!(
                "line {}: more than {} global tags",
                n + 1,
                crate::abi::MT_GLOBAL_BITS
            ));
        }
        if tags.iter().any(|t| t.name == name) {
            return Err(format!("line {}: tag {name:?} listed twice", n + 1));
        }
        let mut t = GlobalTag {
            name,
            ttl: None,
            system: false,
            deadlock: false,
        };
        for w in words {
            if let Some(v) = w.strip_prefix("ttl=") {
                let ttl = parse_ttl(v).map_err(|e| format!("line {}: {e}", n + 1))?;
                t.ttl = (ttl != MT_TTL_INF as u8).then_some(ttl);
            } else if w == "system" {
                t.system = true;
            } else if w == "deadlock" {
                t.deadlock = true;
            } else {
                return Err(format!(
                    "line {}: unknown attribute {w:?} (ttl=N, system, deadlock)",
                    n + 1
                ));
            }
        }
        canon += &format!("{} {:?} {}", t.name, t.ttl, t.system);
        // (only when set: tables without it keep their digests)
        canon += if t.deadlock { " deadlock\n" } else { "\n" };
        tags.push(t);
    }
    // 0 means "no table" on the wire, so a real table never digests to 0.
    let d = machine_host_id(&canon);
    let digest = ((d >> 16) ^ (d & 0xffff)) as u16;
    Ok(ClusterTable {
        tags,
        digest: digest.max(1),
    })
}

/// The machine's host id from a stable machine identity (e.g.
/// /etc/machine-id): FNV-1a, never 0.
pub fn machine_host_id(identity: &str) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in identity.trim().bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    h.max(1)
}

/// Host id of a network namespace: the machine's own id for the namespace
/// `tags up` ran in (`home`), else the kernel side's host_of() folding of
/// the namespace cookie into the machine id.
pub fn netns_host_id(machine: u32, home: u64, cookie: u64) -> u32 {
    if cookie == 0 || cookie == home {
        return machine;
    }
    (machine ^ ((cookie.wrapping_mul(0x9e3779b97f4a7c15) >> 32) as u32)) | 1
}

/// Bit index -> (word, mask) in a vector of MT_TAGS bits.
pub fn bit(tag: u32) -> (usize, u64) {
    assert!((tag as usize) < MT_TAGS);
    ((tag / 64) as usize, 1u64 << (tag % 64))
}

/// The bits set in a vector, ascending.
pub fn bits(vec: &[u64]) -> Vec<u32> {
    let mut out = Vec::new();
    for (w, &word) in vec.iter().enumerate() {
        let mut m = word;
        while m != 0 {
            let b = m.trailing_zeros();
            out.push(w as u32 * 64 + b);
            m &= m - 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(n: u32, system: &[u32]) -> BTreeMap<u32, TagInfo> {
        (0..n)
            .map(|t| {
                (
                    t,
                    TagInfo {
                        system: system.contains(&t),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn names() {
        assert!(validate_name("tau1").is_ok());
        assert!(validate_name("net.hipow:3-x_y").is_ok());
        assert_eq!(validate_name(""), Err(NameError::Empty));
        assert!(matches!(
            validate_name(&"a".repeat(32)),
            Err(NameError::TooLong(_))
        ));
        assert!(validate_name(&"a".repeat(31)).is_ok());
        assert!(matches!(validate_name("a b"), Err(NameError::BadChar(_))));
        assert!(matches!(validate_name("-x"), Err(NameError::BadChar(_))));
        assert!(matches!(validate_name("é"), Err(NameError::BadChar(_))));
    }

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl("0"), Ok(0));
        assert_eq!(parse_ttl("254"), Ok(254));
        assert_eq!(parse_ttl("inf"), Ok(255));
        assert!(parse_ttl("255").is_err());
        assert!(parse_ttl("-1").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("2s"), Ok(2000));
        assert_eq!(parse_duration_ms("1m"), Ok(60_000));
        assert!(
            parse_duration_ms("750").is_err(),
            "a bare number has no unit"
        );
        assert_eq!(parse_duration_ms("24h"), Ok(86_400_000));
        assert!(parse_duration_ms("0ms").is_err());
        assert!(parse_duration_ms("soon").is_err());
        assert!(parse_duration_ms("25h").is_err());
    }

    #[test]
    fn lifeline_first_fit() {
        assert_eq!(alloc_lifeline(&[], 100), Some(0));
        assert_eq!(alloc_lifeline(&[(0, 100)], 50), Some(100));
        assert_eq!(alloc_lifeline(&[(0, 100), (150, 10)], 50), Some(100));
        assert_eq!(alloc_lifeline(&[(0, 100), (140, 10)], 50), Some(150));
        assert_eq!(alloc_lifeline(&[(0, MT_LIFELINE_SLOTS as u32)], 1), None);
        // A full cluster table leaves half the pool to local tags.
        let global: Vec<(u32, u32)> = (0..crate::abi::MT_GLOBAL_BITS as u32)
            .map(|i| (i * GLOBAL_LIFELINE, GLOBAL_LIFELINE))
            .collect();
        assert_eq!(
            alloc_lifeline(&global, MT_LIFELINE_SLOTS as u32 / 2),
            Some(MT_LIFELINE_SLOTS as u32 / 2)
        );
        assert_eq!(alloc_lifeline(&[], 0), None);
        assert_eq!(alloc_lifeline(&[(10, 0)], 5), Some(0));
    }

    /// Figure 3 of the paper: TTL 2 reaches t_g with 0 and never t_h; the
    /// terminator t_d and the system thread t_c reject.
    #[test]
    fn figure3_rules() {
        let info = tags(1, &[]);
        let mut ta = Thread::default();
        ta.held.insert(0, 2);
        let mut tc = Thread {
            system: true,
            ..Default::default()
        };
        let mut td = Thread {
            terminators: vec![0],
            ..Default::default()
        };
        let (mut tf, mut tg, mut th, mut te) = (
            Thread::default(),
            Thread::default(),
            Thread::default(),
            Thread::default(),
        );
        assert!(tc.receive(&ta.outgoing(), &info).is_empty());
        assert!(td.receive(&ta.outgoing(), &info).is_empty());
        te.receive(&td.outgoing(), &info);
        assert!(te.held.is_empty());
        tf.receive(&ta.outgoing(), &info);
        assert_eq!(tf.held[&0], 1);
        tg.receive(&tf.outgoing(), &info);
        assert_eq!(tg.held[&0], 0);
        th.receive(&tg.outgoing(), &info);
        assert!(th.held.is_empty());
    }

    #[test]
    fn keeps_larger_ttl_and_infinite() {
        let info = tags(2, &[1]);
        let mut a = Thread::default();
        a.held.insert(0, MT_TTL_INF as u8);
        let mut b = Thread::default();
        b.held.insert(0, 3);
        b.receive(&a.outgoing(), &info);
        assert_eq!(b.held[&0], MT_TTL_INF as u8);
        // a system tag never reaches a user thread
        let mut s = Thread {
            system: true,
            ..Default::default()
        };
        s.held.insert(1, 5);
        let mut u = Thread::default();
        assert!(u.receive(&s.outgoing(), &info).is_empty());
    }

    #[test]
    fn cluster_tables() {
        let t = parse_cluster("# cluster\nreq\nhipow ttl=3 # a mode\n\nkmode system\n").unwrap();
        assert_eq!(t.tags.len(), 3);
        assert_eq!(
            t.tags[1],
            GlobalTag {
                name: "hipow".into(),
                ttl: Some(3),
                system: false,
                deadlock: false,
            }
        );
        assert!(t.tags[2].system);
        let d = parse_cluster("req\nhipow ttl=3\nkmode system deadlock").unwrap();
        assert!(d.tags[2].deadlock && !d.tags[0].deadlock);
        assert_ne!(
            t.digest, d.digest,
            "the deadlock attribute is part of the table"
        );
        // comments and blank lines do not change the digest; content does
        assert_eq!(
            t.digest,
            parse_cluster("req\nhipow ttl=3\nkmode system")
                .unwrap()
                .digest
        );
        assert_ne!(
            t.digest,
            parse_cluster("req\nhipow ttl=4\nkmode system")
                .unwrap()
                .digest
        );
        assert_ne!(
            t.digest,
            parse_cluster("hipow ttl=3\nreq\nkmode system")
                .unwrap()
                .digest
        );
        assert!(parse_cluster("a\na").is_err());
        assert!(parse_cluster("a colour=red").is_err());
        assert!(parse_cluster("bad name").is_err());
        let many: String = (0..17).map(|i| format!("t{i}\n")).collect();
        assert!(parse_cluster(&many).is_err());
    }

    /// A file with far too many lines (a word list given by mistake) is
    /// refused at the 17th tag. It used to be read to the end first, with a
    /// duplicate check quadratic in its length: 100 000 lines took minutes.
    #[test]
    fn cluster_table_refused_at_the_first_tag_too_many() {
        let many: String = (0..2_000).map(|i| format!("w{i}\n")).collect();
        let e = parse_cluster(&many).unwrap_err();
        assert!(e.starts_with("line 17: "), "{e}");
        // the first tag too many is named even if a later line is bad
        let twenty: String = (0..20).map(|i| format!("w{i}\n")).collect();
        let e = parse_cluster(&format!("{twenty}bad name!\n")).unwrap_err();
        assert!(e.starts_with("line 17: "), "{e}");
    }

    #[test]
    fn host_ids() {
        let m = machine_host_id("0123456789abcdef\n");
        assert_ne!(m, 0);
        assert_eq!(m, machine_host_id("0123456789abcdef"));
        assert_ne!(m, machine_host_id("fedcba9876543210"));
        assert_eq!(netns_host_id(m, 7, 7), m);
        let a = netns_host_id(m, 7, 4096);
        assert_ne!(a, m);
        assert_eq!(a & 1, 1);
        assert_ne!(a, netns_host_id(m, 7, 4097));
    }

    #[test]
    fn bit_helpers() {
        assert_eq!(bit(0), (0, 1));
        assert_eq!(bit(63), (0, 1 << 63));
        assert_eq!(bits(&[0b1011]), vec![0, 1, 3]);
    }
}
