//! Kallsyms parsing: a snapshot of /proc/kallsyms as a sorted table of
//! kernel text symbols, and address → symbol lookup.
//!
//! Invariant: the table is sorted by address with one name per address
//! (the last alias in kallsyms order, as perf picks), so a lookup is one
//! binary search.

/// A kallsyms snapshot: text symbols sorted by address.
#[derive(Debug, Default, Clone)]
pub struct Kallsyms {
    syms: Vec<(u64, String)>,
}

impl Kallsyms {
    /// Parses /proc/kallsyms text ("addr type name \[module\]"). Keeps text
    /// symbols (t/T/w/W); an all-zero table (addresses hidden) is empty.
    pub fn parse(text: &str) -> Kallsyms {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let a = u64::from_str_radix(f.next()?, 16).ok()?;
                let t = f.next()?;
                let name = f.next()?;
                let module = f.next();
                if a == 0 || !matches!(t, "t" | "T" | "w" | "W") {
                    return None;
                }
                let name = match module {
                    Some(m) => format!("{name} {m}"),
                    None => name.to_string(),
                };
                Some((a, name))
            })
            .collect();
        // Aliases share an address (memset, __memset, __pi_memset): keep
        // the last one in kallsyms order, as perf does (it prefers the
        // alias with a non-zero size, which only the last one has).
        syms.sort_by_key(|s| s.0); // stable: kallsyms order within an address
        let mut out: Vec<(u64, String)> = Vec::with_capacity(syms.len());
        for s in syms {
            match out.last_mut() {
                Some(l) if l.0 == s.0 => *l = s,
                _ => out.push(s),
            }
        }
        Kallsyms { syms: out }
    }
    pub fn len(&self) -> usize {
        self.syms.len()
    }
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
    /// The symbol containing `addr` (the nearest one at or below it).
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|(a, _)| *a <= addr);
        if i == 0 {
            return None;
        }
        Some(&self.syms[i - 1].1)
    }
}
