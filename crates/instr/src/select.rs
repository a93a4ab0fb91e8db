//! Which functions to instrument: exact names and shell-style globs
//! (`*`, `?`), from the command line or a file (one a line, `#` comments),
//! or the hottest functions of a profile ([`hottest`]: "the functions that
//! make up 80% of the samples", Paper IV §5.4 chose by gprof; mantle by its
//! own profiler, `mantle prof`).
//! A glob matcher this small (two wildcards, no classes) is written here
//! rather than pulled in as a dependency.

/// A set of name patterns; empty means nothing is chosen.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    patterns: Vec<String>,
    /// Names taken as they are (a profile's names are not globs).
    exact: std::collections::BTreeSet<String>,
}

impl Selection {
    /// Every function.
    pub fn all() -> Self {
        Selection {
            patterns: vec!["*".into()],
            exact: Default::default(),
        }
    }

    /// Adds a name or a glob.
    pub fn add(&mut self, pattern: &str) {
        self.patterns.push(pattern.to_string());
    }

    /// Adds a name, matched exactly.
    pub fn add_exact(&mut self, name: &str) {
        self.exact.insert(name.to_string());
    }

    /// Adds the names of a list file: one name or glob a line, blank lines
    /// and `#` comments ignored.
    pub fn add_list(&mut self, text: &str) {
        for line in text.lines().map(str::trim) {
            if !line.is_empty() && !line.starts_with('#') {
                self.add(line);
            }
        }
    }

    /// Whether nothing was asked for.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty() && self.exact.is_empty()
    }

    /// Whether `name` is chosen.
    pub fn matches(&self, name: &str) -> bool {
        self.exact.contains(name)
            || self
                .patterns
                .iter()
                .any(|p| glob(p.as_bytes(), name.as_bytes()))
    }
}

/// The hottest functions of a profile: `rows` are (function, samples),
/// a name possibly repeated (the same function seen in several processes);
/// returns the fewest functions, hottest first (ties by name, so the
/// choice is reproducible), whose samples make up at least `percent` of
/// all samples in `rows`, with the share they make up. Names that are not
/// functions (unresolved addresses: `0x…`, `image+0x…`; `[…]`
/// placeholders) count in the
/// total but are never chosen.
pub fn hottest(rows: &[(String, u64)], percent: f64) -> Result<(Vec<String>, f64), String> {
    if !(percent > 0.0 && percent <= 100.0) {
        return Err(format!("share {percent} is not a percentage in (0, 100]"));
    }
    let mut by_name: std::collections::BTreeMap<&str, u64> = Default::default();
    let mut total = 0u64;
    for (name, n) in rows {
        total = total.saturating_add(*n);
        if !name.is_empty()
            && !name.starts_with("0x")
            && !name.contains("+0x")
            && !name.starts_with('[')
        {
            let e = by_name.entry(name.as_str()).or_default();
            *e = e.saturating_add(*n);
        }
    }
    if total == 0 {
        return Err("the profile has no samples".into());
    }
    let mut v: Vec<(&str, u64)> = by_name.into_iter().filter(|&(_, n)| n > 0).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let (mut acc, mut out) = (0u64, Vec::new());
    for (name, n) in v {
        // Stop once acc / total >= percent / 100.
        if acc as f64 * 100.0 >= percent * total as f64 {
            break;
        }
        acc += n;
        out.push(name.to_string());
    }
    Ok((out, acc as f64 * 100.0 / total as f64))
}

/// Shell-style match of `*` (any run) and `?` (any one byte).
/// Iterative with one backtrack point: linear in practice, no recursion.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, si));
                pi += 1;
            }
            Some(&c) if c == b'?' || c == s[si] => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let cases = [
            ("*", "", true),
            ("*", "abc", true),
            ("a*", "abc", true),
            ("a*c", "abc", true),
            ("a*c", "abd", false),
            ("?bc", "abc", true),
            ("?bc", "bc", false),
            ("*_fn", "my_fn", true),
            ("*_fn", "my_fn2", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("", "", true),
            ("", "a", false),
        ];
        for (p, s, want) in cases {
            assert_eq!(glob(p.as_bytes(), s.as_bytes()), want, "{p} vs {s}");
        }
    }

    fn rows(v: &[(&str, u64)]) -> Vec<(String, u64)> {
        v.iter().map(|&(n, c)| (n.to_string(), c)).collect()
    }

    #[test]
    fn hottest_takes_the_fewest_functions_reaching_the_share() {
        let r = rows(&[("a", 50), ("b", 30), ("c", 15), ("d", 5)]);
        // Every share from 1% to 100%: the chosen set is the shortest
        // prefix of the sorted list whose sum reaches it.
        for pct in 1..=100u32 {
            let (names, got) = hottest(&r, f64::from(pct)).unwrap();
            let want = match pct {
                1..=50 => vec!["a"],
                51..=80 => vec!["a", "b"],
                81..=95 => vec!["a", "b", "c"],
                _ => vec!["a", "b", "c", "d"],
            };
            assert_eq!(names, want, "{pct}%");
            assert!(got >= f64::from(pct), "{pct}%: {got}");
        }
    }

    #[test]
    fn hottest_merges_names_breaks_ties_and_skips_non_functions() {
        // "x" appears twice (two processes): 40 in all, hotter than "y".
        let r = rows(&[
            ("y", 30),
            ("x", 20),
            ("x", 20),
            ("0x401000", 20),
            ("bzip2+0x1f0", 5),
            ("[unknown]", 5),
        ]);
        let (names, share) = hottest(&r, 50.0).unwrap();
        assert_eq!(names, vec!["x", "y"]);
        assert!((share - 70.0).abs() < 1e-9);
        // Unresolved samples count in the total: 100% cannot be reached
        // by functions; every function is chosen.
        assert_eq!(hottest(&r, 100.0).unwrap().0, vec!["x", "y"]);
        // Ties: by name.
        let (names, _) = hottest(&rows(&[("b", 10), ("a", 10)]), 50.0).unwrap();
        assert_eq!(names, vec!["a"]);
        for bad in [0.0, -1.0, 100.5, f64::NAN] {
            assert!(hottest(&r, bad).is_err(), "{bad}");
        }
        assert!(hottest(&[], 80.0).is_err());
        assert!(hottest(&rows(&[("a", 0)]), 80.0).is_err());
    }

    #[test]
    fn exact_names_are_not_globs() {
        let mut s = Selection::default();
        s.add_exact("operator*");
        assert!(s.matches("operator*") && !s.matches("operator+"));
        assert!(!s.is_empty());
    }

    #[test]
    fn list_file() {
        let mut s = Selection::default();
        assert!(s.is_empty());
        s.add_list("# comment\n\n  foo \nbar*\n");
        assert!(s.matches("foo") && s.matches("barx") && !s.matches("baz"));
    }
}
