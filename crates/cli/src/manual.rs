//! `mantle completions` and `mantle man`: shell completions and manual
//! pages generated from the one clap definition (`flags::command`), so that
//! they cannot drift from `--help`.

use crate::exit::{Failure, EXIT_FAILURE, EXIT_NOT_FOUND};
use std::path::Path;

/// Prints the completion script for `shell` to standard output.
pub fn completions(shell: clap_complete::Shell) {
    let mut cmd = crate::flags::command();
    clap_complete::generate(shell, &mut cmd, "mantle", &mut std::io::stdout());
}

/// Prints the page of `path` (no words: the top page), or with `out`
/// writes every page into that directory.
pub fn man(path: &[String], out: Option<&Path>) -> Result<(), Failure> {
    let top = built();
    if let Some(dir) = out {
        return write_all(&top, dir);
    }
    let mut cmd = &top;
    for word in path {
        cmd = cmd.find_subcommand(word).ok_or_else(|| {
            Failure::new(
                EXIT_NOT_FOUND,
                format!("man: no subcommand `{}`", path.join(" ")),
            )
        })?;
    }
    let mut page = Vec::new();
    render(cmd, &mut page).map_err(|e| Failure::new(EXIT_FAILURE, format!("man: {e}")))?;
    use std::io::Write;
    std::io::stdout()
        .write_all(&page)
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("man: standard output: {e}")))
}

/// The command tree with every subcommand named by its full path
/// (`mantle-tag-create`), as the pages and their SEE ALSO refer to it.
fn built() -> clap::Command {
    let mut c = crate::flags::command();
    c.build();
    c
}

fn render(cmd: &clap::Command, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(cmd.clone()).render(w)
}

/// Every page of the tree under `top`, as (file name, command).
pub fn pages(top: &clap::Command) -> Vec<(String, clap::Command)> {
    fn walk(c: &clap::Command, name: String, out: &mut Vec<(String, clap::Command)>) {
        for s in c.get_subcommands().filter(|s| s.get_name() != "help") {
            walk(s, format!("{name}-{}", s.get_name()), out);
        }
        out.push((format!("{name}.1"), c.clone()));
    }
    let mut out = Vec::new();
    walk(top, top.get_name().to_string(), &mut out);
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn write_all(top: &clap::Command, dir: &Path) -> Result<(), Failure> {
    let fail = |what: &Path, e: std::io::Error| {
        Failure::new(EXIT_FAILURE, format!("man: {}: {e}", what.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    for (file, cmd) in pages(top) {
        let path = dir.join(&file);
        let mut page = Vec::new();
        render(&cmd, &mut page).map_err(|e| fail(&path, e))?;
        std::fs::write(&path, page).map_err(|e| fail(&path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand, at any depth, has a page, and each page names
    /// its command and has the help's text.
    #[test]
    fn every_subcommand_has_a_man_page() {
        let top = built();
        let names: Vec<String> = pages(&top).into_iter().map(|(f, _)| f).collect();
        let mut want = Vec::new();
        fn walk(c: &clap::Command, name: String, want: &mut Vec<String>) {
            want.push(format!("{name}.1"));
            for s in c.get_subcommands().filter(|s| s.get_name() != "help") {
                walk(s, format!("{name}-{}", s.get_name()), want);
            }
        }
        walk(&top, "mantle".into(), &mut want);
        want.sort();
        assert_eq!(names, want);
        for must in [
            "mantle.1",
            "mantle-run.1",
            "mantle-tag-create.1",
            "mantle-man.1",
        ] {
            assert!(names.iter().any(|n| n == must), "{must} missing: {names:?}");
        }
        let dir = std::env::temp_dir().join(format!("mantle-man-{}", std::process::id()));
        assert!(write_all(&top, &dir).is_ok());
        for (file, cmd) in pages(&top) {
            let page = std::fs::read_to_string(dir.join(&file))
                .unwrap()
                .replace("\\-", "-");
            assert!(page.contains(".TH"), "{file}: no title");
            let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
            let first = about.split_whitespace().next().unwrap_or("");
            assert!(
                page.contains(first),
                "{file}: lacks its help text {about:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn completions_cover_every_shell_and_subcommand() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut crate::flags::command(), "mantle", &mut out);
            let s = String::from_utf8(out).unwrap();
            for sub in crate::flags::command().get_subcommands() {
                assert!(s.contains(sub.get_name()), "{shell}: {}", sub.get_name());
            }
        }
    }
}
