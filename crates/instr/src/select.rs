//! Which functions to instrument: exact names and shell-style globs
//! (`*`, `?`), from the command line or a file (one a line, `#` comments).
//! A glob matcher this small (two wildcards, no classes) is written here
//! rather than pulled in as a dependency.

/// A set of name patterns; empty means nothing is chosen.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    patterns: Vec<String>,
}

impl Selection {
    /// Every function.
    pub fn all() -> Self {
        Selection {
            patterns: vec!["*".into()],
        }
    }

    /// Adds a name or a glob.
    pub fn add(&mut self, pattern: &str) {
        self.patterns.push(pattern.to_string());
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
        self.patterns.is_empty()
    }

    /// Whether `name` is chosen.
    pub fn matches(&self, name: &str) -> bool {
        self.patterns
            .iter()
            .any(|p| glob(p.as_bytes(), name.as_bytes()))
    }
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

    #[test]
    fn list_file() {
        let mut s = Selection::default();
        assert!(s.is_empty());
        s.add_list("# comment\n\n  foo \nbar*\n");
        assert!(s.matches("foo") && s.matches("barx") && !s.matches("baz"));
    }
}
