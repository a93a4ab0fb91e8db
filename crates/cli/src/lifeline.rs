//! `mantle tag lifeline`: this machine's lifeline of a tag, merged with
//! lifelines saved on other machines, written as text, JSON, a Chrome trace
//! or SVG (mantle_tags::lifeline_file gathers and mantle_tags::lifeline
//! renders; this reads and writes the files the user names).

use crate::exit::{Failure, EXIT_NOT_FOUND};
use mantle_tags::lifeline::{render, Format};
use mantle_tags::lifeline_file;
use std::io::Write;
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
    let write = |w: &mut dyn Write| -> std::io::Result<()> {
        // row by row: a long merge is never one string in memory
        if let Format::Text = format {
            mantle_tags::lifeline::write_text(&l, w)?;
        } else if let Format::Json = format {
            lifeline_file::write_json(&l, w)?;
        } else {
            w.write_all(render(&l, format, &title).as_bytes())?;
        }
        w.flush()
    };
    match output {
        Some(p) => std::fs::File::create(&p)
            .and_then(|f| write(&mut std::io::BufWriter::new(f)))
            .map_err(|e| Failure::io("cannot write", &p, &e)),
        None => {
            // A reader that went away ends the output quietly (SIGPIPE is
            // the default disposition: see main).
            let _ = write(&mut std::io::BufWriter::new(std::io::stdout().lock()));
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
    // Every file is checked (regular, size) before any is read; one file
    // is in memory at a time, its records converted one by one and
    // counted against one budget for the whole merge.
    for f in merge {
        crate::input::open_regular("lifeline file", f, crate::input::MAX_MERGE_BYTES)?;
    }
    let mut budget = lifeline_file::MAX_MERGE_RECORDS;
    let mut saved = Vec::new();
    for f in merge {
        let bytes =
            crate::input::read_regular_bytes("lifeline file", f, crate::input::MAX_MERGE_BYTES)?;
        let s = lifeline_file::parse_tag(&f.display().to_string(), &bytes, name, &mut budget)?;
        saved.push(s.records);
    }
    Ok(lifeline_file::gather(name, local, saved))
}
