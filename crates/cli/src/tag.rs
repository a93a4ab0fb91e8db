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
        TagCmd::Class {
            class,
            who,
            children,
        } => {
            let mut arg = 0;
            if class == "system" {
                arg |= mantle_tags::abi::MT_CLASS_SYSTEM;
            }
            if children.is_some() {
                arg |= mantle_tags::abi::MT_CLASS_CHILDREN_USER;
            }
            let r = t.op(OpCode::Class, None, arg, who.target())?;
            match children {
                Some(ch) => println!(
                    "{} thread(s) marked {class}, the processes they fork {ch}",
                    r.len()
                ),
                None => println!("{} thread(s) marked {class}", r.len()),
            }
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
            no_output_tag,
            command,
        } => {
            // Everything that can fail is checked before the first tag is
            // set: the program, then every tag.
            let program = find_program(&command[0])?;
            for n in &names {
                t.lookup(n)?;
            }
            if no_output_tag {
                return relay_untagged(&t, &names, ttl, &command);
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

/// `tag run --no-output-tag`: the command runs tagged in a child (`mantle
/// tag run` without the flag), its standard output through a pipe that
/// this process relays. The relay refuses the tags for itself (a
/// terminator, which any thread may set on itself) before its first read,
/// and a reception is decided when the reader reads: whatever the child
/// wrote, the relay stays untagged, and so does the reader of its output
/// (`x=$(...)`'s shell). Exits with the command's status (128+N for signal
/// N, as a shell reports it).
fn relay_untagged(
    t: &Tags,
    names: &[String],
    ttl: Option<u8>,
    command: &[String],
) -> Result<(), Failure> {
    use std::io::Write;
    use std::os::unix::process::ExitStatusExt;
    let exe = std::env::current_exe().map_err(|e| {
        Failure::io(
            "cannot find mantle itself",
            std::path::Path::new("/proc/self/exe"),
            &e,
        )
    })?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["tag", "run"]).args(names);
    if let Some(x) = ttl {
        cmd.args([
            "--ttl",
            &if u32::from(x) == mantle_tags::abi::MT_TTL_INF as u32 {
                "inf".to_string()
            } else {
                x.to_string()
            },
        ]);
    }
    cmd.arg("--")
        .args(command)
        .stdout(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::io("cannot run", &exe, &e))?;
    let mut out = child.stdout.take().expect("piped");
    let me = std::process::id();
    for n in names {
        let r = if mantle_sys::os::privileged() {
            t.op(OpCode::Term, Some(n), 0, Target::Tid(me)).map(|_| ())
        } else {
            selfset::terminate(n)
        };
        if let Err(e) = r {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e.into());
        }
    }
    let mut stdout = std::io::stdout().lock();
    // A reader that went away (`| head`) ends the relay; the command then
    // meets its own SIGPIPE.
    let _ = std::io::copy(&mut out, &mut stdout);
    let _ = stdout.flush();
    drop(out);
    let st = child
        .wait()
        .map_err(|e| Failure::io("cannot wait for", &exe, &e))?;
    let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
    std::process::exit(code)
}
