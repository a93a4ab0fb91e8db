//! Text for a terminal: what a process names itself (comm), and the hosts
//! and IPC names of a merged lifeline file, are anybody's bytes. Printed as
//! they are, an unprivileged process named with escape sequences or a
//! newline would move root's cursor, recolour the screen or forge rows in
//! `mantle tag threads` and `tag lifeline` (issue 32). Every text output
//! passes such strings through [`term`], which escapes control characters
//! as `systemctl` does (C escapes: `\n`, `\t`, `\xNN`); a backslash is
//! doubled, so an escaped name is never confused with a literal one. Pure:
//! no system calls.

use std::borrow::Cow;
use std::fmt::Write;

/// `s` with every control character (C0, DEL, C1) escaped and `\` doubled;
/// borrowed when there is nothing to escape (the common case).
pub fn term(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c == '\\' || c.is_control()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_borrowed_unchanged() {
        assert!(matches!(term("postgres: walwriter"), Cow::Borrowed(_)));
        assert_eq!(term("naïve-ünïcode"), "naïve-ünïcode");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(term("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(term("x\nforged row"), "x\\nforged row");
        assert_eq!(term("\t\r\x7f\u{9b}"), "\\t\\r\\x7f\\x9b");
        assert_eq!(term("back\\slash"), "back\\\\slash");
    }

    #[test]
    fn no_control_character_survives() {
        for b in 0u32..0x250 {
            let c = char::from_u32(b).unwrap();
            let s = format!("a{c}b");
            assert!(!term(&s).chars().any(|c| c.is_control()), "{b:#x}");
        }
    }
}
