//! `mantle tags ...`: loading, unloading and inspecting the tags kernel
//! side as a whole (mantle_tags::load does it; this reads the files the
//! user names and prints).

use crate::exit::{Failure, EXIT_MISSING};
use crate::flags::{default_lib, TagsCmd};
use crate::render;
use mantle_tags::kernel::UpOpts;
use mantle_tags::{load, Error};

pub fn run(c: TagsCmd) -> Result<(), Failure> {
    match c {
        TagsCmd::Up {
            lib,
            cluster,
            no_fd_channels,
            json,
        } => {
            // Privilege first: an unprivileged user learns that before any
            // error about the file it named.
            load::may_load()?;
            // Validate the cluster table before loading anything.
            let table = match &cluster {
                Some(p) => {
                    let text = crate::input::read_regular(
                        "cluster table",
                        p,
                        crate::input::MAX_CLUSTER_BYTES,
                    )?;
                    Some(mantle_tags::model::parse_cluster(&text).map_err(|e| {
                        Error::Invalid(format!("cluster table {}: {e}", p.display()))
                    })?)
                }
                None => None,
            };
            let lib = lib.unwrap_or_else(default_lib);
            let lib = lib.canonicalize().unwrap_or(lib);
            let r = load::up(&lib, UpOpts { no_fd_channels }, table.as_ref())?;
            if let (Some(t), false) = (&table, json) {
                println!(
                    "cluster table: {} global tag(s), digest {:04x}",
                    t.tags.len(),
                    t.digest
                );
            }
            render::up(&r, json);
            Ok(())
        }
        TagsCmd::Down => {
            match load::down() {
                Err(Error::NotLoaded) => Err(Failure::new(
                    EXIT_MISSING,
                    "the tags kernel side is not loaded: nothing to unload",
                )),
                r => Ok(r?),
            }?;
            println!("tags kernel side unloaded");
            Ok(())
        }
        TagsCmd::Export(a) => crate::otlp::export(a),
        TagsCmd::Status { json, quiet } => {
            let st = load::status()?;
            if quiet {
                // `systemctl is-active --quiet`: the answer is the status.
                return if st.loaded {
                    Ok(())
                } else {
                    Err(Failure::new(EXIT_MISSING, ""))
                };
            }
            render::status(&st, json);
            Ok(())
        }
    }
}
