//! `mantle demo`: mantle's main job on built-in defaults. A tag set on one
//! process spreads through a small system of unmodified programs, and its
//! lifeline is printed:
//!
//! ```text
//!   socat UNIX-LISTEN (untagged server) --exec--> tr a-z A-Z
//!        ^ unix stream request
//!   mantle tag run demo -- sh -c 'printf ... | sed ... | socat - UNIX-CONNECT'
//! ```
//! The server is started first, untagged; only the shell is tagged. The tag
//! reaches the pipeline by fork, `sed` and socat's client through pipes, the
//! server through the unix socket, and the program the server runs through
//! the pipe socat feeds it. Replies (the upper-cased text coming back) carry
//! nothing.

use mantle_tags::{CreateOpts, Error, Tags};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn missing(what: &str) -> Error {
    Error::Missing(format!("{what} (apt-get install {what})"))
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

pub fn run(json: bool) -> Result<(), Error> {
    if !mantle_sys::os::privileged() {
        return Err(Error::Permission(
            "the demo loads the kernel side and needs root (CAP_SYS_ADMIN or CAP_BPF in the initial user namespace)".into(),
        ));
    }
    if !have("socat") {
        return Err(missing("socat"));
    }
    let exe = std::env::current_exe().map_err(|e| Error::sys("own path", e))?;
    let we_loaded = !mantle_tags::kernel::loaded();
    if we_loaded {
        let lib = exe
            .parent()
            .map(|d| d.join("libmantle.so"))
            .unwrap_or_default();
        mantle_tags::kernel::up(&lib, Default::default())?;
        eprintln!("mantle demo: loaded the tags kernel side (will unload it at the end)");
    }
    let result = run_loaded(&exe, json);
    if we_loaded {
        mantle_tags::kernel::down()?;
    }
    result
}

fn run_loaded(exe: &std::path::Path, json: bool) -> Result<(), Error> {
    let t = Tags::open()?;
    let name = format!("demo-{}", std::process::id());
    t.create(
        &name,
        &CreateOpts {
            lifeline: 1024,
            ..Default::default()
        },
    )?;
    let r = scenario(&t, exe, &name, json);
    let deleted = t.delete(&name);
    let (lifeline, holders) = r?;
    deleted?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "tag": name,
                "holders": holders,
                "lifeline": mantle_tags::lifeline_file::to_json(&lifeline)
            }))
            .expect("json")
        );
        return Ok(());
    }
    println!("\nWho received tag {name}, in order (mantle tag lifeline {name}):");
    print!(
        "{}",
        mantle_tags::lifeline::render(&lifeline, mantle_tags::lifeline::Format::Story, "")
    );
    let mut procs: Vec<(u32, &str)> = lifeline
        .iter()
        .map(|r| (r.rx_pid, r.rx_comm.as_str()))
        .collect();
    procs.sort();
    procs.dedup_by_key(|p| p.0);
    let names: Vec<String> = procs.iter().map(|(p, c)| format!("{c}[{p}]")).collect();
    println!(
        "\n{} processes received {name}: {}",
        procs.len(),
        names.join(" ")
    );
    if !holders.is_empty() {
        let still: Vec<String> = holders
            .iter()
            .map(|h| format!("{}[{}]", h.comm, h.pid))
            .collect();
        println!(
            "still holding it when the pipeline ended: {}",
            still.join(" ")
        );
    }
    println!(
        "\nThe untagged socat server and the `tr` it runs picked the tag up from the request; the reply \
         sent back to the client carried nothing (replies never do). The tag {name} is now deleted."
    );
    Ok(())
}

type Outcome = (
    Vec<mantle_tags::ReceptionInfo>,
    Vec<mantle_tags::ThreadInfo>,
);

/// Progress lines: on standard output, or on standard error with --json
/// (whose standard output is one JSON document).
fn note(json: bool, text: &str) {
    if json {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

fn scenario(t: &Tags, exe: &std::path::Path, name: &str, json: bool) -> Result<Outcome, Error> {
    let dir = PathBuf::from(format!("/run/mantle/demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::sys(format!("create {}", dir.display()), e))?;
    let sock = dir.join("server.sock");
    let server_spec = format!("UNIX-LISTEN:{},fork", sock.display());
    // The server: untagged, started before anything holds the tag. It stays
    // up (`sleep` keeps `tr`'s process alive) so that holders can be listed.
    let mut server = Command::new("socat")
        .args([&server_spec, "SYSTEM:tr a-z A-Z; sleep 2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::sys("start socat server", e))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sock.exists() {
        if Instant::now() > deadline {
            let _ = server.kill();
            return Err(Error::Refused("the socat server did not start".into()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    note(
        json,
        &format!(
            "server:   socat {server_spec} SYSTEM:\"tr a-z A-Z; sleep 2\"   (pid {}, untagged)\n",
            server.id()
        ),
    );
    let pipeline = format!(
        "printf 'hello from a tagged pipeline\\n' | sed 's/hello/HELLO/' | socat -t 2 - UNIX-CONNECT:{}",
        sock.display()
    );
    note(
        json,
        &format!("pipeline: mantle tag run {name} -- sh -c \"{pipeline}\"\n"),
    );
    // The reply goes to a file: had it come back through a pipe, this
    // process would have read a request and picked up the tag itself.
    let reply = dir.join("reply");
    let reply_file = std::fs::File::create(&reply)
        .map_err(|e| Error::sys(format!("create {}", reply.display()), e))?;
    let status = Command::new(exe)
        .args(["tag", "run", name, "--", "sh", "-c", &pipeline])
        .stdout(reply_file)
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| Error::sys("run the pipeline", e))?;
    note(
        json,
        &format!(
            "reply:    {}",
            std::fs::read_to_string(&reply).unwrap_or_default()
        ),
    );
    let holders = t.threads(Some(name))?;
    let lifeline = t.lifeline(name)?;
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    if !status.success() {
        return Err(Error::Refused(format!("the pipeline failed: {status}")));
    }
    Ok((lifeline, holders))
}
