//! `mantle tag lifeline`: this machine's lifeline of a tag, merged with
//! lifelines saved on other machines, written as text, JSON, a Chrome trace
//! or SVG (mantle_tags::lifeline_file gathers and mantle_tags::lifeline
//! renders; this reads and writes the files the user names).

use crate::exit::{Failure, EXIT_NOT_FOUND};
use mantle_tags::lifeline::{render, Format};
use mantle_tags::lifeline_file;
use std::path::PathBuf;

pub fn run(
    name: &str,
    format: &str,
    output: Option<PathBuf>,
    merge: &[PathBuf],
) -> Result<(), Failure> {
    let l = records(name, merge)?;
    let format = match format {
        "json" => Format::Json,
        "chrome" => Format::Chrome,
        "svg" => Format::Svg,
        _ => Format::Text,
    };
    let title = format!("lifeline of tag {name} ({} receptions)", l.len());
    let text = render(&l, format, &title);
    match output {
        Some(p) => std::fs::write(&p, text).map_err(|e| Failure::io("cannot write", &p, &e)),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// This machine's lifeline of `name` merged with the files in `merge`
/// (also for `--otlp`).
pub fn records(name: &str, merge: &[PathBuf]) -> Result<Vec<mantle_tags::ReceptionInfo>, Failure> {
    // A tag made without a lifeline is "not found" (exit 5), like a tag
    // that does not exist.
    let local = lifeline_file::local(name)
        .map_err(Failure::from)
        .and_then(|l| {
            l.ok_or_else(|| {
                Failure::new(
                    EXIT_NOT_FOUND,
                    format!("tag {name:?} has no lifeline (create it with --lifeline N)"),
                )
            })
        });
    let local = match local {
        Ok(l) => Some(l),
        // With files to merge, a machine without the tag (or without mantle
        // loaded) just contributes nothing.
        Err(e) if merge.is_empty() => return Err(e),
        Err(_) => None,
    };
    let mut saved = Vec::new();
    for f in merge {
        let text = std::fs::read_to_string(f).map_err(|e| Failure::io("cannot read", f, &e))?;
        saved.push(lifeline_file::parse(&f.display().to_string(), &text)?);
    }
    Ok(lifeline_file::gather(name, local, saved))
}
