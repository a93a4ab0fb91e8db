//! `mantle tag ...`: single tags: create, delete, list, set and take away,
//! the threads holding them, and running a command that holds them from
//! its first instruction. `tag lifeline` and `tag deadlock-guard` have
//! their own modules. The work is mantle_tags'; unprivileged `delete` and
//! `run` go through the trusted path (selfset).

use crate::exit::Failure;
use crate::flags::TagCmd;
use crate::names::{find_program, user_uid};
use crate::render::{self, print_json, NameOnly, ThreadView};
use crate::{deadlock, lifeline, selfset};
use mantle_tags::abi::OpCode;
use mantle_tags::{CreateOpts, Tags, Target};

pub fn run(c: TagCmd) -> Result<(), Failure> {
    if let TagCmd::Lifeline {
        name,
        json,
        format,
        output,
        merge,
        otlp,
        timeout,
    } = c
    {
        if let Some(url) = otlp {
            return crate::otlp::lifeline(&name, &merge, &url, timeout);
        }
        return lifeline::run(&name, if json { "json" } else { &format }, output, &merge);
    }
    let t = Tags::open()?;
    match c {
        TagCmd::Create {
            name,
            ttl,
            system,
            lifeline,
            owner,
            replies,
            deadlock,
            anyone,
            per_request,
            expire,
            json,
        } => {
            let owner_uid = owner.as_deref().map(user_uid).transpose()?;
            let opts = CreateOpts {
                ttl,
                system,
                lifeline,
                owner_uid,
                replies,
                deadlock,
                anyone,
                per_request,
            };
            let info = mantle_tags::create::create(&t, &name, &opts, expire)?;
            if json {
                print_json(&info);
            } else {
                println!("created tag {} (bit {})", info.name, info.bit);
            }
        }
        TagCmd::Delete { name } => {
            if mantle_sys::os::privileged() {
                t.delete(&name)?;
            } else {
                // A tag's owner may delete it without privilege: through
                // the trusted path (the kernel side checks the caller's uid
                // against the owner's), as the library call does.
                selfset::delete(&name)?;
            }
            println!("deleted tag {name}");
        }
        TagCmd::Ls { json } => {
            let l = t.list()?;
            if json {
                print_json(&l);
            } else {
                render::tag_list(&l);
            }
        }
        TagCmd::Set { name, who, ttl } => {
            let r = t.op(
                OpCode::Set,
                Some(&name),
                ttl.map(|x| x as u32).unwrap_or(0),
                who.target(),
            )?;
            println!("tag {name} set on {} thread(s)", r.len());
        }
        TagCmd::Clear { name, who } => {
            let r = t.op(OpCode::Clear, Some(&name), 0, who.target())?;
            println!("tag {name} cleared on {} thread(s)", r.len());
        }
        TagCmd::Terminate { name, who, undo } => {
            let code = if undo { OpCode::Unterm } else { OpCode::Term };
            let r = t.op(code, Some(&name), 0, who.target())?;
            println!(
                "{} {name} on {} thread(s)",
                if undo { "accepting" } else { "terminating" },
                r.len()
            );
        }
        TagCmd::Class { class, who } => {
            let r = t.op(
                OpCode::Class,
                None,
                (class == "system") as u32,
                who.target(),
            )?;
            println!("{} thread(s) marked {class}", r.len());
        }
        TagCmd::Threads { name, json } => render::threads(&t.threads(name.as_deref())?, json),
        TagCmd::Get { tid, json } => {
            // A tid beyond the view cannot exist (out of range, exit 2);
            // one within it may not (exit 5).
            let v = t.vector_of(tid)?;
            let (pid, comm) = mantle_tags::thread::proc_thread(tid)?;
            if !json {
                println!("{}", v.join(" "));
            } else if mantle_sys::os::privileged() {
                // The whole thread object, even for a thread that holds
                // nothing.
                print_json(&mantle_tags::thread::object(&t, tid, pid, comm)?);
            } else {
                print_json(&ThreadView {
                    tid,
                    pid,
                    comm,
                    tags: v.into_iter().map(|name| NameOnly { name }).collect(),
                });
            }
        }
        TagCmd::Lifeline { .. } => unreachable!("handled before opening the table"),
        TagCmd::DeadlockGuard {
            who,
            name,
            count,
            timeout,
            json,
        } => deadlock::run(&t, &who, name, count, timeout, json)?,
        TagCmd::Run {
            names,
            ttl,
            command,
        } => {
            // Everything that can fail is checked before the first tag is
            // set: the program, then every tag.
            let program = find_program(&command[0])?;
            for n in &names {
                t.lookup(n)?;
            }
            let me = std::process::id();
            let ttl = ttl.map(|x| x as u32).unwrap_or(0);
            for n in &names {
                if mantle_sys::os::privileged() {
                    t.op(OpCode::Set, Some(n), ttl, Target::Tid(me))?;
                } else {
                    // Unprivileged: through the trusted path, which can
                    // only ever change this thread's own tags.
                    selfset::set(n, ttl)?;
                }
            }
            use std::os::unix::process::CommandExt;
            let e = std::process::Command::new(&program)
                .arg0(&command[0])
                .args(&command[1..])
                .exec();
            return Err(Failure::io("cannot run", &program, &e));
        }
    }
    Ok(())
}
