//! Tags across hosts (mTags, seeds/000, section 4 "distributed tags"), with
//! real hosts on one machine: three network namespaces A, B and C joined by
//! veth pairs, and unmodified programs (socat, sh) doing the talking.
//!
//! ```text
//!   A: mantle tag run req loc -- socat  ──TCP──▶  B: socat relay  ──TCP──▶  C: socat | sh
//!   ▲                                                                          │
//!   └──────────────── TCP (a new request from C's sh) ◀────────────────────────┘
//! ```
//!
//! `req` is a global tag (cluster table, TTL 5), `loc` a local one. The
//! tests check, on one run of that scenario:
//! * the global tag arrives on C with its TTL decremented twice (5 → 4 → 3),
//!   from B, and the Lamport clocks increase along the chain;
//! * tcpdump on the B→C link sees the option: kind 0xfd, ExID 6d54 ("mT"),
//!   the cluster digest, a vector with `req`'s bit, B's relay pid, one TTL
//!   byte (4);
//! * the local tag never leaves A: its bit is in no option vector, and no
//!   thread or lifeline record on B or C has it;
//! * lifelines saved as JSON per host (`--json`, split by host) and merged
//!   with `--merge` (mantle unloaded, so only the files count) come out in
//!   causal order, including the reception back on A after C.
//!
//! Needs root, `ip`, `nsenter`, socat and tcpdump (scripts/setup.sh installs
//! them). Every test is ignored with that reason unless included (as
//! scripts/test.sh does as root); included, a missing piece fails every test
//! with a message naming it. The harness is mantle-testsupport.
//!
//! The kernel side is global machine state: the scenario holds an exclusive
//! flock on /run/mantle-kernel.lock for as long as it touches it (load with
//! the cluster table, run, collect, unload, merge). Namespaces and
//! interfaces have names unique to this process, and a guard deletes them,
//! kills every process it started and unloads mantle, on failure too.

use mantle_testsupport::cli::{mantle, mantle_ok, run};
use mantle_testsupport::lock::take_kernel_lock;
use mantle_testsupport::poll_until_for as poll_until;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");
const TIMEOUT: Duration = Duration::from_secs(15);

/// The global tag that travels, its TTL in the cluster table, a second
/// global tag nobody holds (its bit must stay clear), and the local tag.
const GLOBAL: &str = "req";
const GLOBAL_TTL: u64 = 5;
const IDLE_GLOBAL: &str = "hipow";
/// A global tag only the stop-carry connection uses (its own lifeline, so
/// that the chain's records of GLOBAL stay one causal chain).
const STOP_GLOBAL: &str = "stopc";
const LOCAL: &str = "loc";
/// A global deadlock tag (cluster table attribute `deadlock`).
const DEADLOCK: &str = "dl";

// ----------------------------------------------------------- the scenario, once

/// The scenario's results. It runs once per binary; a failure, or a missing
/// prerequisite, fails every test with the same message.
#[track_caller]
fn scenario() -> &'static Scenario {
    static S: OnceLock<Result<Scenario, Missing>> = OnceLock::new();
    // A failure inside the scenario is caught and stored, so that the other
    // tests report it too instead of running the scenario again.
    let r = S.get_or_init(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(run_scenario)).unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(Missing(format!("{FAILED}{msg}")))
        })
    });
    match r {
        Ok(s) => s,
        Err(Missing(why)) if why.starts_with(FAILED) => panic!("{why}"),
        Err(Missing(why)) => panic!("missing here, needed by the A→B→C scenario: {why}"),
    }
}

const FAILED: &str = "the A→B→C scenario failed: ";

/// A missing prerequisite (said as such). Real failures panic.
#[derive(Debug)]
struct Missing(String);

// ------------------------------------------------------------ helpers

#[track_caller]
fn sh_ok(prog: &str, args: &[&str]) {
    let o = run(prog, args);
    assert_eq!(
        o.code,
        0,
        "`{prog} {}` exited {}: {}",
        args.join(" "),
        o.code,
        o.stderr.trim()
    );
}

fn json(s: &str, what: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {s}"))
}

// ---------------------------------------------------------- the guard

/// Everything the scenario set up, undone on drop (on panic too): the
/// processes it started are killed (by pid), its namespaces deleted, mantle
/// unloaded if it loaded it, its temp dir removed.
struct Guard {
    children: Vec<Child>,
    netns: Vec<String>,
    loaded: bool,
    dir: PathBuf,
}

impl Guard {
    fn spawn(&mut self, what: &str, cmd: &mut Command) -> u32 {
        let c = cmd
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let pid = c.id();
        self.children.push(c);
        pid
    }

    fn kill_all(&mut self) {
        for c in &mut self.children {
            // SAFETY: signalling a child we spawned and have not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        for c in &mut self.children {
            let t0 = Instant::now();
            while c.try_wait().ok().flatten().is_none() {
                if t0.elapsed() > Duration::from_secs(3) {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.children.clear();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.kill_all();
        for n in &self.netns {
            // Whatever our processes left running in our own namespaces.
            let o = run("ip", &["netns", "pids", n]);
            for pid in o
                .stdout
                .split_whitespace()
                .filter_map(|s| s.parse::<i32>().ok())
            {
                // SAFETY: a pid living in a namespace this test created.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        for n in &self.netns {
            let _ = run("ip", &["netns", "del", n]);
        }
        if self.loaded {
            let _ = mantle(&["tags", "down"]);
        }
        if std::env::var_os("MANTLE_TEST_KEEP").is_some() {
            eprintln!(
                "tags_net: MANTLE_TEST_KEEP set: keeping {}",
                self.dir.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

// ----------------------------------------------------------- scenario

/// What one run of the chain left behind, for the tests to check.
struct Scenario {
    /// Namespace (host) names.
    a: String,
    b: String,
    c: String,
    /// The relay's pid on B and the server's on C (socat, exec'd by nsenter).
    relay_pid: u32,
    /// `tags status --json` and `tag ls --json` after the run.
    status: Value,
    tags: Vec<Value>,
    /// Lifelines (--json) of the global and the local tag.
    ll_global: Vec<Value>,
    ll_local: Vec<Value>,
    /// `tag threads --json` for the local tag, and the pids living in B and C.
    local_holders: Vec<Value>,
    remote_pids: BTreeSet<u32>,
    /// The TCP entries of the local deposit table (`chan_dep`, pinned) after
    /// the chain: each as its key's bytes, in hex.
    tcp_deposits: Vec<String>,
    /// What B's stop-carry reader received ("ab" when it ran), and the
    /// lifeline of the tag its sender held for the first byte.
    stop_got: String,
    ll_stop: Vec<Value>,
    /// Every mTags option seen on the B→C link (data segments and others).
    options_bc: Vec<WireOpt>,
    /// Data segments seen B→C (with a payload).
    data_segments_bc: usize,
    /// The per-host JSON files, and `--merge` of them (given in reverse
    /// host order) with mantle unloaded.
    per_host: BTreeMap<String, Vec<Value>>,
    merged: Vec<Value>,
    /// What the server on C wrote, and what came back to A.
    c_got: String,
    back_got: String,
    /// The deadlock ring A -> B -> C -> A over TCP: whether it hung without
    /// the guard, and the guard's report with it (and how long it took).
    dl: DeadlockRun,
}

struct DeadlockRun {
    unguarded: Result<(), String>,
    report: Option<Value>,
    after: Duration,
    pids: [u32; 3],
}

fn run_scenario() -> Result<Scenario, Missing> {
    let euid = mantle_testsupport::euid();
    if euid != 0 {
        return Err(Missing(format!(
            "tags_net needs root (running as uid {euid})"
        )));
    }
    let progs = [
        ("ip", "iproute2"),
        ("nsenter", "util-linux"),
        ("socat", "socat"),
        ("tcpdump", "tcpdump"),
    ];
    if let Some((prog, pkg)) = progs
        .iter()
        .find(|(p, _)| !mantle_testsupport::have_program(p))
    {
        return Err(Missing(format!(
            "{prog} (Debian package {pkg}; scripts/setup.sh installs it)"
        )));
    }
    let _lock = take_kernel_lock().map_err(Missing)?;

    let lib = mantle_testsupport::build::libmantle().map_err(Missing)?;

    let t0 = Instant::now();
    let step = |what: &str| eprintln!("tags_net: [{:6.2}s] {what}", t0.elapsed().as_secs_f64());
    let id = std::process::id();
    let dir = std::env::temp_dir().join(format!("mantle-tags-net.{id}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("temp dir");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();

    // Hosts: unique names (interfaces are ≤ 15 characters).
    let tag = format!("mtn{}", id % 100_000);
    let (a, b, c) = (format!("{tag}a"), format!("{tag}b"), format!("{tag}c"));
    let mut g = Guard {
        children: vec![],
        netns: vec![],
        loaded: false,
        dir: dir.clone(),
    };
    for n in [&a, &b, &c] {
        let o = run("ip", &["netns", "add", n]);
        if o.code != 0 {
            return Err(Missing(format!("ip netns add {n}: {}", o.stderr.trim())));
        }
        g.netns.push(n.clone());
        sh_ok("ip", &["-n", n, "link", "set", "lo", "up"]);
    }
    // A–B 10.77.1.0/24, B–C 10.77.2.0/24, C–A 10.77.3.0/24 (the way back).
    let links = [
        (&a, &b, "10.77.1.1", "10.77.1.2", "ab"),
        (&b, &c, "10.77.2.1", "10.77.2.2", "bc"),
        (&c, &a, "10.77.3.2", "10.77.3.1", "ca"),
    ];
    for (x, y, ax, ay, nm) in links {
        let (ix, iy) = (format!("{tag}{nm}0"), format!("{tag}{nm}1"));
        let o = run(
            "ip",
            &[
                "link", "add", &ix, "netns", x, "type", "veth", "peer", "name", &iy, "netns", y,
            ],
        );
        if o.code != 0 {
            return Err(Missing(format!("veth pair: {}", o.stderr.trim())));
        }
        sh_ok(
            "ip",
            &["-n", x, "addr", "add", &format!("{ax}/24"), "dev", &ix],
        );
        sh_ok(
            "ip",
            &["-n", y, "addr", "add", &format!("{ay}/24"), "dev", &iy],
        );
        sh_ok("ip", &["-n", x, "link", "set", &ix, "up"]);
        sh_ok("ip", &["-n", y, "link", "set", &iy, "up"]);
    }
    let bc_if = format!("{tag}bc0"); // B's end of the B–C link

    // The kernel side, with the cluster table.
    let cluster = p("cluster");
    fs::write(
        &cluster,
        format!("# tags_net test\n{GLOBAL} ttl={GLOBAL_TTL}\n{IDLE_GLOBAL}\n{DEADLOCK} deadlock\n{STOP_GLOBAL}\n"),
    )
    .unwrap();
    let _ = mantle(&["tags", "down"]);
    let up = mantle(&[
        "tags",
        "up",
        "--cluster",
        &cluster,
        "--lib",
        lib.to_str().unwrap(),
    ]);
    if up.code != 0 {
        return Err(Missing(format!(
            "`mantle tags up --cluster` failed (exit {}): {}",
            up.code,
            up.stderr.trim()
        )));
    }
    g.loaded = true;
    step("loaded with the cluster table");
    mantle_ok(&["tag", "create", LOCAL, "--lifeline", "256"]);

    let ns = |n: &str| -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{n}"));
        cmd
    };
    let log = |f: &str| File::create(dir.join(f)).unwrap();
    // Runs a command on A to its end, its output in <name>.out and .err.
    let run_on_a = |name: &str, args: &[&str]| {
        let err = format!("{name}.err");
        let st = ns(&a)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log(&format!("{name}.out")))
            .stderr(log(&err))
            .status()
            .unwrap_or_else(|e| panic!("run {name} on A: {e}"));
        assert!(
            st.success(),
            "{name} on A failed: {}",
            fs::read_to_string(p(&err)).unwrap_or_default()
        );
    };

    // A: the listener for the way back (started untagged).
    let back = p("back.out");
    g.spawn(
        "A listener",
        ns(&a)
            .args([
                "socat",
                "-u",
                "TCP-LISTEN:7002,reuseaddr",
                &format!("OPEN:{back},creat,trunc"),
            ])
            .stderr(log("a-listen.err")),
    );
    // C: a server that stores the first line, then makes a request of its
    // own back to A (the shell that read the line holds what it received).
    let c_out = p("c.out");
    let c_script = format!(
        "socat -u TCP-LISTEN:7001,reuseaddr STDOUT | {{ read line; echo \"$line\" > {c_out}; echo \"back:$line\" | socat -u - TCP:10.77.3.1:7002; cat >/dev/null; }}"
    );
    g.spawn(
        "C server",
        ns(&c).args(["sh", "-c", &c_script]).stderr(log("c.err")),
    );
    // B: an unmodified relay.
    let relay_pid = g.spawn(
        "B relay",
        ns(&b)
            .args(["socat", "TCP-LISTEN:7000,reuseaddr", "TCP:10.77.2.2:7001"])
            .stderr(log("b.err")),
    );
    // tcpdump on the B–C link, B's side.
    let pcap = p("bc.pcap");
    let td_err = p("tcpdump.err");
    g.spawn(
        "tcpdump",
        ns(&b)
            .args([
                "tcpdump",
                "-i",
                &bc_if,
                "-Z",
                "root",
                "--immediate-mode",
                "-U",
                "-nn",
                "-s",
                "256",
                "-w",
                &pcap,
                "tcp",
            ])
            .stderr(File::create(&td_err).unwrap()),
    );
    let ready = poll_until(TIMEOUT, || {
        fs::read_to_string(&td_err)
            .ok()
            .filter(|s| s.contains("listening on"))
            .map(|_| ())
    });
    if ready.is_none() {
        panic!(
            "tcpdump did not start: {}",
            fs::read_to_string(&td_err).unwrap_or_default()
        );
    }
    // Listeners up?
    for (n, port) in [(&a, "7002"), (&c, "7001"), (&b, "7000")] {
        let up = poll_until(TIMEOUT, || {
            let o = run(
                "nsenter",
                &[
                    &format!("--net=/run/netns/{n}"),
                    "ss",
                    "-Hltn",
                    &format!("sport = :{port}"),
                ],
            );
            o.stdout.contains(port).then_some(())
        });
        assert!(up.is_some(), "listener on {n}:{port} did not come up");
    }

    // A: the tagged client, holding the global and the local tag.
    step("hosts, servers and tcpdump ready");
    let t_start = Instant::now();
    run_on_a(
        "a",
        &[
            MANTLE,
            "tag",
            "run",
            GLOBAL,
            LOCAL,
            "--",
            "sh",
            "-c",
            "echo hello-across | socat -t1 - TCP:10.77.1.2:7000",
        ],
    );

    let back_got = poll_until(TIMEOUT, || {
        fs::read_to_string(&back).ok().filter(|s| s.contains('\n'))
    })
    .unwrap_or_else(|| {
        panic!(
            "nothing came back to A (C said: {})",
            fs::read_to_string(p("c.err")).unwrap_or_default()
        )
    });
    let c_got = fs::read_to_string(&c_out).unwrap_or_default();
    step("the chain came back to A");

    // A connection that stops carrying: a tagged sender on A sends "a" to B,
    // drops the global tag, then sends "b" on the same connection. B's
    // reader (comm mt-stopcarry) must receive the tag once, with "a".
    let stop_out = p("stopcarry.out");
    let srv = format!(
        "import ctypes, socket\n\
         ctypes.CDLL(None).prctl(15, b'mt-stopcarry', 0, 0, 0)\n\
         l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         l.bind(('10.77.1.2', 7003)); l.listen(1); open('{stop_out}.ready', 'w').close()\n\
         c, _ = l.accept(); got = c.recv(1) + c.recv(1)\n\
         open('{stop_out}', 'w').write(got.decode())\n"
    );
    g.spawn(
        "B stop-carry reader",
        ns(&b)
            .args(["python3", "-c", &srv])
            .stderr(log("stopcarry-b.err")),
    );
    assert!(
        poll_until(TIMEOUT, || fs::metadata(format!("{stop_out}.ready")).ok()).is_some(),
        "B's stop-carry reader did not start: {}",
        fs::read_to_string(p("stopcarry-b.err")).unwrap_or_default()
    );
    let cli = format!(
        "import ctypes, socket, time\n\
         m = ctypes.CDLL('{}')\n\
         s = socket.create_connection(('10.77.1.2', 7003)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n\
         s.send(b'a'); time.sleep(0.3)\n\
         assert m.mantle_tag_clear(b'{STOP_GLOBAL}', 0) == 0, 'mantle_tag_clear'\n\
         s.send(b'b'); time.sleep(0.3); s.close()\n",
        lib.display()
    );
    run_on_a(
        "stopcarry-a",
        &[
            MANTLE,
            "tag",
            "run",
            STOP_GLOBAL,
            "--",
            "python3",
            "-c",
            &cli,
        ],
    );
    let stop_got = poll_until(TIMEOUT, || {
        fs::read_to_string(&stop_out).ok().filter(|s| s.len() == 2)
    })
    .unwrap_or_default();
    step("the stop-carry connection ran");
    // The B–C connection ends when A's client closes; let the FIN exchange pass.
    std::thread::sleep(Duration::from_millis(300));

    // Collect while loaded.
    let ll_global: Vec<Value> = serde_json::from_value(json(
        &mantle_ok(&["tag", "lifeline", GLOBAL, "--json"]),
        "lifeline",
    ))
    .unwrap();
    let ll_stop: Vec<Value> = serde_json::from_value(json(
        &mantle_ok(&["tag", "lifeline", STOP_GLOBAL, "--json"]),
        "lifeline",
    ))
    .unwrap();
    let ll_local: Vec<Value> = serde_json::from_value(json(
        &mantle_ok(&["tag", "lifeline", LOCAL, "--json"]),
        "lifeline",
    ))
    .unwrap();
    let local_holders: Vec<Value> = serde_json::from_value(json(
        &mantle_ok(&["tag", "threads", LOCAL, "--json"]),
        "threads",
    ))
    .unwrap();
    let status = json(&mantle_ok(&["tags", "status", "--json"]), "status");
    let tcp_deposits = tcp_deposits();
    let tags_v = json(&mantle_ok(&["tag", "ls", "--json"]), "tag ls");
    let tags: Vec<Value> = match tags_v {
        Value::Array(v) => v,
        Value::Object(ref m) => m
            .get("tags")
            .and_then(|t| t.as_array())
            .cloned()
            .unwrap_or_default(),
        _ => vec![],
    };
    // Every process now living in B or C (by network namespace inode).
    let mut remote_pids = BTreeSet::new();
    for n in [&b, &c] {
        let o = run("ip", &["netns", "pids", n]);
        remote_pids.extend(
            o.stdout
                .split_whitespace()
                .filter_map(|s| s.parse::<u32>().ok()),
        );
    }

    g.kill_all(); // tcpdump flushes on SIGTERM
    step("collected; processes stopped");
    let dl = deadlock_ring(&mut g, &dir, [&a, &b, &c]);
    step("deadlock ring done");
    let raw = fs::read(&pcap).unwrap_or_default();
    let (options_bc, data_segments_bc) = parse_pcap(&raw, "10.77.2.1", "10.77.2.2");
    eprintln!(
        "tags_net: chain ran in {:.1}s; {} bytes of pcap on B-C, {} data segment(s) B->C, {} mTags option(s)",
        t_start.elapsed().as_secs_f64(),
        raw.len(),
        data_segments_bc,
        options_bc.len()
    );

    // Lifelines "saved on each host": split by receiving host, then merged
    // with mantle unloaded (so only the files count), files in reverse order.
    let mut per_host: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in &ll_global {
        per_host
            .entry(r["host"].as_str().unwrap_or("?").to_string())
            .or_default()
            .push(r.clone());
    }
    let _ = mantle(&["tags", "down"]);
    g.loaded = false;
    step("unloaded");
    let mut files = Vec::new();
    for h in [&c, &b, &a] {
        let f = p(&format!("lifeline-{h}.json"));
        fs::write(
            &f,
            serde_json::to_string_pretty(&per_host.get(h.as_str()).cloned().unwrap_or_default())
                .unwrap(),
        )
        .unwrap();
        files.push(f);
    }
    let mut args = vec!["tag", "lifeline", GLOBAL, "--json", "--merge"];
    args.extend(files.iter().map(|s| s.as_str()));
    let merged: Vec<Value> =
        serde_json::from_value(json(&mantle_ok(&args), "merged lifeline")).unwrap();

    Ok(Scenario {
        a: a.clone(),
        b: b.clone(),
        c: c.clone(),
        relay_pid,
        status,
        tags,
        ll_global,
        ll_local,
        local_holders,
        remote_pids,
        tcp_deposits,
        stop_got,
        ll_stop,
        options_bc,
        data_segments_bc,
        per_host,
        merged,
        c_got,
        back_got,
        dl,
    })
    // g drops here: namespaces deleted, temp dir removed; then the lock.
}

/// The TCP entries (key type MT_K_TCP, 8) of the pinned `chan_dep`, by
/// `bpftool map dump`: the key is struct mt_chan_key (tags.h: a, b, then the
/// type as a little-endian u32 at byte 16, then pad).
fn tcp_deposits() -> Vec<String> {
    let o = run(
        "bpftool",
        &[
            "-j",
            "map",
            "dump",
            "pinned",
            "/sys/fs/bpf/mantle/tags/maps/chan_dep",
        ],
    );
    assert_eq!(o.code, 0, "bpftool map dump chan_dep: {}", o.stderr);
    let entries: Vec<Value> = serde_json::from_value(json(&o.stdout, "chan_dep dump")).unwrap();
    entries
        .iter()
        .map(|e| {
            e["key"]
                .as_array()
                .expect("a raw key")
                .iter()
                .map(|b| {
                    u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
                })
                .collect::<Vec<u8>>()
        })
        .filter(|k| k.len() == 24 && u32::from_le_bytes([k[16], k[17], k[18], k[19]]) == 8)
        .map(|k| k.iter().map(|b| format!("{b:02x}")).collect())
        .collect()
}

/// Runs the ring of synchronous services (examples/deadlock/ring.py) A -> B -> C
/// -> A across the three hosts twice: unguarded (it must hang), then with
/// `mantle tag deadlock-guard` on A using the global deadlock tag.
fn deadlock_ring(g: &mut Guard, dir: &Path, hosts: [&String; 3]) -> DeadlockRun {
    let ring = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/deadlock/ring.py"
    );
    // (listen port, next host address, next port) for A, B, C; base varies
    // per run so that the second ring does not meet the first's sockets.
    let start = |g: &mut Guard, base: u16, tag: &str| -> (Child, [u32; 3], PathBuf) {
        let next = [
            ("10.77.1.2", base + 1),
            ("10.77.2.2", base + 2),
            ("10.77.3.1", base),
        ];
        let mut pids = [0u32; 3];
        for i in (1..3).rev() {
            let (nh, np) = next[i];
            pids[i] = g.spawn(
                &format!("ring {i}"),
                Command::new("nsenter")
                    .arg(format!("--net=/run/netns/{}", hosts[i]))
                    .args([
                        "python3",
                        ring,
                        &(base + i as u16).to_string(),
                        nh,
                        &np.to_string(),
                    ])
                    .stdout(File::create(dir.join(format!("ring{tag}{i}.out"))).unwrap()),
            );
        }
        let out = dir.join(format!("ring{tag}0.out"));
        let (nh, np) = next[0];
        let a = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", hosts[0]))
            .args([
                "python3",
                ring,
                &base.to_string(),
                nh,
                &np.to_string(),
                "--start",
            ])
            .stdin(Stdio::piped())
            .stdout(File::create(&out).unwrap())
            .spawn()
            .expect("start ring A");
        pids[0] = a.id();
        for i in 0..3 {
            let f = dir.join(format!("ring{tag}{i}.out"));
            let up = poll_until(TIMEOUT, || {
                fs::read_to_string(&f)
                    .ok()
                    .filter(|s| s.contains("listening"))
                    .map(|_| ())
            });
            assert!(up.is_some(), "ring member {i} did not start");
        }
        (a, pids, out)
    };
    let go = |a: &mut Child| {
        use std::io::Write;
        a.stdin.take().unwrap().write_all(b"go\n").unwrap();
    };
    let sleeping = |pid: u32| {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|st| {
                st.rsplit(')')
                    .next()
                    .map(|r| r.trim_start().starts_with('S'))
            })
            .unwrap_or(false)
    };

    // Unguarded: after 1.5 s nobody was answered and all three sleep.
    let (mut a, pids, out) = start(g, 7100, "u");
    go(&mut a);
    std::thread::sleep(Duration::from_millis(1500));
    let said = fs::read_to_string(&out).unwrap_or_default();
    let unguarded = if said.contains("answered") || said.contains("failed") {
        Err(format!("the unguarded ring did not hang: A said {said:?}"))
    } else if let Some(p) = pids.iter().find(|p| !sleeping(**p)) {
        Err(format!("ring member {p} is not blocked"))
    } else {
        Ok(())
    };
    let _ = a.kill();
    let _ = a.wait();
    g.kill_all();

    // Guarded.
    let (mut a, pids, _) = start(g, 7110, "g");
    let mut guard = Command::new(MANTLE)
        .args([
            "tag",
            "deadlock-guard",
            "--json",
            "--count",
            "1",
            "--timeout",
            "20s",
        ])
        .args(["--pid", &pids[0].to_string(), "--name", DEADLOCK])
        .stdout(Stdio::piped())
        .stderr(File::create(dir.join("guard.err")).unwrap())
        .spawn()
        .expect("start deadlock-guard");
    let held = poll_until(TIMEOUT, || {
        let o = mantle(&["tag", "get", "--tid", &pids[0].to_string(), "--json"]);
        o.stdout.contains(&format!("\"{DEADLOCK}\"")).then_some(())
    });
    assert!(held.is_some(), "the guard never tagged A");
    let t0 = Instant::now();
    go(&mut a);
    let mut line = String::new();
    {
        use std::io::BufRead;
        let _ = std::io::BufReader::new(guard.stdout.take().unwrap()).read_line(&mut line);
    }
    let after = t0.elapsed();
    let _ = guard.wait();
    let _ = a.kill();
    let _ = a.wait();
    g.kill_all();
    let report = serde_json::from_str(&line).ok();
    DeadlockRun {
        unguarded,
        report,
        after,
        pids,
    }
}

// -------------------------------------------------------------- pcap

/// One mTags TCP option as seen on the wire.
#[derive(Debug, Clone)]
struct WireOpt {
    raw: Vec<u8>,
    digest: u16,
    vec: u16,
    host: u32,
    lamport: u32,
    pid: u32,
    ttls: Vec<u8>,
    has_payload: bool,
}

/// mTags options in TCP segments from `src` to `dst` in a pcap file, and
/// the number of such segments that carry data.
fn parse_pcap(raw: &[u8], src: &str, dst: &str) -> (Vec<WireOpt>, usize) {
    let ip = |s: &str| -> [u8; 4] {
        let v: Vec<u8> = s.split('.').map(|x| x.parse().unwrap()).collect();
        [v[0], v[1], v[2], v[3]]
    };
    let (src, dst) = (ip(src), ip(dst));
    assert!(raw.len() >= 24, "pcap file too short ({} bytes)", raw.len());
    let magic = u32::from_le_bytes(raw[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2c3d4 | 0xa1b23c4d => true,
        0xd4c3b2a1 | 0x4d3cb2a1 => false,
        m => panic!("not a pcap file (magic {m:08x})"),
    };
    let u32at = |b: &[u8], o: usize| {
        let a: [u8; 4] = b[o..o + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let link = u32at(raw, 20);
    let l2 = match link {
        1 => 14,   // Ethernet
        113 => 16, // Linux cooked
        276 => 20, // Linux cooked v2
        101 => 0,  // raw IP
        other => panic!("unexpected pcap link type {other}"),
    };
    let (mut opts, mut data) = (Vec::new(), 0);
    let mut off = 24;
    while off + 16 <= raw.len() {
        let incl = u32at(raw, off + 8) as usize;
        let pkt = &raw[off + 16..(off + 16 + incl).min(raw.len())];
        off += 16 + incl;
        if pkt.len() < l2 + 20 {
            continue;
        }
        if link == 1 && pkt[12..14] != [0x08, 0x00] {
            continue;
        }
        let ipb = &pkt[l2..];
        if ipb[0] >> 4 != 4 || ipb[9] != 6 || ipb[12..16] != src || ipb[16..20] != dst {
            continue;
        }
        let ihl = (ipb[0] & 0xf) as usize * 4;
        let total = u16::from_be_bytes([ipb[2], ipb[3]]) as usize;
        if ipb.len() < ihl + 20 {
            continue;
        }
        let tcp = &ipb[ihl..];
        let doff = (tcp[12] >> 4) as usize * 4;
        let payload = total.saturating_sub(ihl + doff);
        if payload > 0 {
            data += 1;
        }
        let optb = &tcp[20..doff.min(tcp.len())];
        let mut i = 0;
        while i < optb.len() {
            match optb[i] {
                0 => break,
                1 => i += 1,
                kind => {
                    if i + 1 >= optb.len() {
                        break;
                    }
                    let len = optb[i + 1] as usize;
                    if len < 2 || i + len > optb.len() {
                        break;
                    }
                    let o = &optb[i..i + len];
                    if kind == 0xfd && len >= 4 && o[2..4] == [0x6d, 0x54] {
                        assert!(len >= 20, "mTags option too short: {o:02x?}");
                        let be16 = |k: usize| u16::from_be_bytes([o[k], o[k + 1]]);
                        let be32 = |k: usize| u32::from_be_bytes(o[k..k + 4].try_into().unwrap());
                        opts.push(WireOpt {
                            raw: o.to_vec(),
                            digest: be16(4),
                            vec: be16(6),
                            host: be32(8),
                            lamport: be32(12),
                            pid: be32(16),
                            ttls: o[20..].to_vec(),
                            has_payload: payload > 0,
                        });
                    }
                    i += len;
                }
            }
        }
    }
    (opts, data)
}

// -------------------------------------------------------------- checks

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("field {k} missing in {v}"))
}
fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str()
        .unwrap_or_else(|| panic!("field {k} missing in {v}"))
}

fn bit_of(sc: &Scenario, name: &str) -> u64 {
    let t = sc
        .tags
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("tag {name} not in `tag ls --json`: {:?}", sc.tags));
    u(t, "bit")
}

/// The first reception of the global tag on `host` over TCP.
fn tcp_reception<'a>(sc: &'a Scenario, host: &str) -> &'a Value {
    sc.ll_global
        .iter()
        .find(|r| s(r, "host") == host && s(r, "via") == "tcp")
        .unwrap_or_else(|| {
            panic!(
                "no TCP reception of {GLOBAL} on {host}; lifeline: {:#?}",
                sc.ll_global
            )
        })
}

#[test]
#[ignore = "needs root, the eBPF kernel side, network namespaces, socat and tcpdump (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn global_tag_reaches_c_with_ttl_decremented_twice() {
    let sc = scenario();
    assert_eq!(
        sc.c_got.trim(),
        "hello-across",
        "the data itself must arrive on C"
    );
    // The sender on A: the socat that connected to B.
    let on_a: Vec<&Value> = sc
        .ll_global
        .iter()
        .filter(|r| s(r, "host") == sc.a && s(r, "tx_host") == sc.a)
        .collect();
    assert!(!on_a.is_empty(), "no receptions on A: {:#?}", sc.ll_global);
    // `tag run` sets it, fork passes it on unchanged, and a pipe hop to a
    // process that already holds it keeps the larger TTL.
    assert!(
        on_a.iter().all(|r| u(r, "ttl") == GLOBAL_TTL),
        "on A the sender side holds TTL {GLOBAL_TTL}: {on_a:#?}"
    );
    let rb = tcp_reception(sc, &sc.b);
    let rc = tcp_reception(sc, &sc.c);
    assert_eq!(s(rb, "tx_host"), sc.a, "B got it from A: {rb}");
    assert_eq!(s(rc, "tx_host"), sc.b, "C got it from B: {rc}");
    assert_eq!(u(rb, "ttl"), GLOBAL_TTL - 1, "one hop to B: {rb}");
    assert_eq!(u(rc, "ttl"), GLOBAL_TTL - 2, "two hops to C: {rc}");
    assert_eq!(
        u(rb, "rx_pid"),
        sc.relay_pid as u64,
        "B's receiver is the relay: {rb}"
    );
    assert_eq!(
        u(rc, "tx_pid"),
        sc.relay_pid as u64,
        "C's sender is B's relay: {rc}"
    );
    assert_eq!(s(rc, "rx_comm"), "socat", "C's receiver is its socat: {rc}");
    // The sending socat on A is the one whose pid B names.
    let sender = on_a
        .iter()
        .find(|r| u(r, "rx_pid") == u(rb, "tx_pid"))
        .unwrap_or_else(|| {
            panic!(
                "B names sender pid {} which never got the tag on A: {on_a:#?}",
                u(rb, "tx_pid")
            )
        });
    // Lamport clocks increase along the chain A → B → C → (back to) A.
    let (la, lb, lc) = (u(sender, "lamport"), u(rb, "lamport"), u(rc, "lamport"));
    assert!(
        la < lb && lb < lc,
        "Lamport clocks along the chain: A {la}, B {lb}, C {lc}"
    );
    let back = sc
        .ll_global
        .iter()
        .find(|r| s(r, "host") == sc.a && s(r, "tx_host") == sc.c)
        .unwrap_or_else(|| panic!("no reception back on A from C: {:#?}", sc.ll_global));
    assert!(
        u(back, "lamport") > lc,
        "A's reception from C is after C's: {back} vs {rc}"
    );
    assert!(
        sc.back_got.contains("back:hello-across"),
        "A's listener got: {:?}",
        sc.back_got
    );
    eprintln!("chain: A lamport {la} ttl {} → B lamport {lb} ttl {} → C lamport {lc} ttl {} → A lamport {} ttl {}", u(sender, "ttl"), u(rb, "ttl"), u(rc, "ttl"), u(back, "lamport"), u(back, "ttl"));
}

#[test]
#[ignore = "needs root, the eBPF kernel side, network namespaces, socat and tcpdump (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn tcpdump_sees_the_option_on_the_b_to_c_link() {
    let sc = scenario();
    let bit = bit_of(sc, GLOBAL);
    let idle = bit_of(sc, IDLE_GLOBAL);
    assert!(
        bit < 16 && idle < 16,
        "global tags live in bits 0-15: {GLOBAL} {bit}, {IDLE_GLOBAL} {idle}"
    );
    assert!(
        sc.data_segments_bc > 0,
        "tcpdump saw no data segment from B to C"
    );
    let data: Vec<&WireOpt> = sc.options_bc.iter().filter(|o| o.has_payload).collect();
    assert!(
        !data.is_empty(),
        "no mTags option (kind 0xfd, ExID 6d54) on any of {} B→C data segments",
        sc.data_segments_bc
    );
    let digest = sc.status.get("cluster_digest").and_then(|d| d.as_u64());
    let rb = tcp_reception(sc, &sc.b);
    for o in &data {
        assert_eq!(o.raw[0], 0xfd, "kind");
        assert_eq!(&o.raw[2..4], &[0x6d, 0x54], "ExID 'mT'");
        assert_eq!(o.raw[1] as usize, o.raw.len(), "length byte");
        assert_ne!(
            o.vec & (1 << bit),
            0,
            "{GLOBAL}'s bit {bit} in the vector {:#06x}",
            o.vec
        );
        assert_eq!(
            o.vec & (1 << idle),
            0,
            "{IDLE_GLOBAL} is held by nobody: its bit {idle} must be clear in {:#06x}",
            o.vec
        );
        assert_eq!(
            o.ttls.len(),
            o.vec.count_ones() as usize,
            "one TTL byte per set bit: {:02x?}",
            o.raw
        );
        assert_eq!(
            o.ttls[0] as u64,
            GLOBAL_TTL - 1,
            "B sends what it holds (TTL {})",
            GLOBAL_TTL - 1
        );
        assert_eq!(o.pid, sc.relay_pid, "the sending pid is B's relay");
        assert!(
            o.lamport as u64 >= u(rb, "lamport"),
            "the option's Lamport clock ({}) is B's, after its reception ({})",
            o.lamport,
            u(rb, "lamport")
        );
        assert_ne!(o.host, 0, "host id");
        if let Some(d) = digest {
            assert_eq!(o.digest as u64, d, "the cluster table digest");
        }
    }
    eprintln!(
        "B→C: {} data segment(s), {} option(s); e.g. {}",
        sc.data_segments_bc,
        sc.options_bc.len(),
        data[0]
            .raw
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

#[test]
#[ignore = "needs root, the eBPF kernel side, network namespaces, socat and tcpdump (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn local_tag_never_leaves_the_host() {
    let sc = scenario();
    let lbit = bit_of(sc, LOCAL);
    assert!(
        lbit >= 16,
        "local tags live above the global range: {LOCAL} has bit {lbit}"
    );
    // It did spread on A (so its absence elsewhere means something).
    assert!(
        sc.ll_local
            .iter()
            .any(|r| s(r, "host") == sc.a && s(r, "rx_comm") == "socat"),
        "{LOCAL} should reach the socat on A through the pipe: {:#?}",
        sc.ll_local
    );
    for r in &sc.ll_local {
        assert_eq!(s(r, "host"), sc.a, "{LOCAL} received off A: {r}");
    }
    for t in &sc.local_holders {
        let pid = u(t, "pid") as u32;
        assert!(
            !sc.remote_pids.contains(&pid),
            "a thread on B or C holds {LOCAL}: {t}"
        );
    }
    // On the wire: every option's vector has only global bits, and only
    // the one global tag the sender held.
    let gbit = bit_of(sc, GLOBAL);
    for o in &sc.options_bc {
        assert_eq!(
            o.vec,
            1 << gbit,
            "only {GLOBAL} travels: vector {:#06x}",
            o.vec
        );
        if lbit < 16 {
            assert_eq!(o.vec & (1 << lbit), 0);
        }
    }
    // C never holds it: its receiver's lifeline records are only of the global tag.
    assert!(!sc
        .ll_local
        .iter()
        .any(|r| s(r, "host") == sc.c || s(r, "host") == sc.b));
}

/// A connection whose sender drops its global tag stops carrying it: of
/// the two one-byte messages on one connection, only the first (sent while
/// the sender held the tag) is a reception of it on B (issue 15: sends and
/// option callbacks look at a socket's carried tags only when its hint bit
/// says it has carried some: sk_hinted with MT_HINT_NET).
#[test]
#[ignore = "needs root, the eBPF kernel side, network namespaces, socat and tcpdump (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn a_connection_stops_carrying_when_its_sender_drops_the_tag() {
    let sc = scenario();
    assert_eq!(sc.stop_got, "ab", "B's reader got both messages");
    let recs: Vec<&Value> = sc
        .ll_stop
        .iter()
        .filter(|r| s(r, "rx_comm") == "mt-stopcarry")
        .collect();
    assert_eq!(
        recs.len(),
        1,
        "one reception of {STOP_GLOBAL} on B's stop-carry connection (the message sent while tagged): {recs:#?}"
    );
    assert_eq!(s(recs[0], "host"), sc.b);
}

/// The chain's TCP flows (A to B, B to C) leave their hosts: their tags
/// travel in the option, and a local deposit for them could never be taken
/// (the reader keys the flow with its own host), so none is made (issue 15,
/// Table 4: route_is_local). Local TCP still deposits: tags.rs.
#[test]
#[ignore = "needs root, the eBPF kernel side, network namespaces, socat and tcpdump (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn a_flow_to_another_host_makes_no_local_deposit() {
    let sc = scenario();
    // The chain did carry tags over TCP (so no deposit means something).
    assert!(
        sc.data_segments_bc > 0 && !sc.options_bc.is_empty(),
        "no tagged TCP traffic B->C"
    );
    assert!(
        sc.tcp_deposits.is_empty(),
        "local TCP deposits for flows between hosts: {:?}",
        sc.tcp_deposits
    );
}

#[test]
#[ignore = "needs root, the eBPF kernel side, network namespaces, socat and tcpdump (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn merged_lifelines_are_in_causal_order() {
    let sc = scenario();
    assert!(
        sc.per_host.len() >= 3,
        "receptions on A, B and C: {:?}",
        sc.per_host.keys()
    );
    let total: usize = sc.per_host.values().map(|v| v.len()).sum();
    assert_eq!(sc.merged.len(), total, "merge keeps every record once");
    // Lamport order, and each host's records in their own order.
    for w in sc.merged.windows(2) {
        assert!(
            u(&w[0], "lamport") <= u(&w[1], "lamport"),
            "merged out of Lamport order: {} then {}",
            w[0],
            w[1]
        );
    }
    let mut last_seq: BTreeMap<String, u64> = BTreeMap::new();
    for r in &sc.merged {
        let h = s(r, "host").to_string();
        let q = u(r, "seq");
        if let Some(&p) = last_seq.get(&h) {
            assert!(q > p, "records of {h} out of their order: seq {p} then {q}");
        }
        last_seq.insert(h, q);
    }
    // Causality: every reception from another host comes after the
    // sender's own reception of the tag (the sender held it before sending).
    for (i, r) in sc.merged.iter().enumerate() {
        if s(r, "host") == s(r, "tx_host") {
            continue;
        }
        let tx = u(r, "tx_pid");
        let cause = sc.merged[..i]
            .iter()
            .position(|e| s(e, "host") == s(r, "tx_host") && u(e, "rx_pid") == tx);
        assert!(
            cause.is_some(),
            "reception {r} has no earlier reception by its sender {}@{}",
            tx,
            s(r, "tx_host")
        );
    }
    // The path across hosts in merged order: A … B … C … A.
    let mut path: Vec<&str> = sc.merged.iter().map(|r| s(r, "host")).collect();
    path.dedup();
    assert_eq!(
        path.first().copied(),
        Some(sc.a.as_str()),
        "starts on A: {path:?}"
    );
    let want = [sc.a.as_str(), sc.b.as_str(), sc.c.as_str(), sc.a.as_str()];
    assert_eq!(path, want, "host order of the merged lifeline");
}

/// Figure 6 across machines: A -> B -> C -> A over TCP between three
/// network namespaces (B and C other hosts). Unguarded, the ring hangs;
/// guarded with the cluster's deadlock tag, the circle is reported when
/// C's request reaches A (no deny point: A's kernel sees it arrive), with
/// the participants in call order.
#[test]
#[ignore = "needs root, the eBPF kernel side, network namespaces, socat and tcpdump (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn deadlock_ring_across_hosts_is_reported() {
    let sc = scenario();
    let dl = &sc.dl;
    if let Err(e) = &dl.unguarded {
        panic!("{e}");
    }
    let r = dl
        .report
        .as_ref()
        .unwrap_or_else(|| panic!("no deadlock report within 20 s"));
    assert!(
        dl.after < Duration::from_secs(5),
        "report took {:?}",
        dl.after
    );
    assert_eq!(r["tag"], DEADLOCK, "{r}");
    assert_eq!(r["via"], "tcp", "{r}");
    assert_eq!(r["refused"], false, "{r}");
    assert_eq!(r["back_to_pid"], dl.pids[0], "{r}");
    let chain: Vec<u64> = r["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(
        chain,
        dl.pids.iter().map(|p| *p as u64).collect::<Vec<_>>(),
        "participants in call order: {r}"
    );
    let hosts: Vec<&str> = r["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["host"].as_str().unwrap())
        .collect();
    assert_eq!(
        hosts,
        vec![sc.a.as_str(), sc.b.as_str(), sc.c.as_str()],
        "{r}"
    );
}

// ----------------------------------------------------- OpenTelemetry (issue 36)

#[path = "otel/jaeger.rs"]
mod jaeger;

/// The chain A -> B -> C and back to A, its global tag's lifeline sent to
/// a real Jaeger (`tag lifeline --merge --otlp`; docs/otel.md): every
/// reception a span of one trace, on its host (the namespace's name), with
/// its via, and the span of the sender's reception as its parent: the
/// sending thread's reception with the largest Lamport clock below the
/// receiver's (found across hosts through the global tag's stamps).
#[test]
#[ignore = "needs root, the eBPF kernel side, network namespaces, socat and tcpdump; and Jaeger (scripts/setup.sh)"]
fn the_global_chain_in_jaeger() {
    let sc = scenario();
    let j = jaeger::jaeger_for("the_global_chain_in_jaeger");
    let l = &sc.ll_global;
    let file =
        std::env::temp_dir().join(format!("mantle-tags-net-otel.{}.json", std::process::id()));
    fs::write(&file, serde_json::to_string(l).unwrap()).unwrap();
    let o = mantle_testsupport::cli::mantle(&[
        "tag",
        "lifeline",
        GLOBAL,
        "--merge",
        file.to_str().unwrap(),
        "--otlp",
        &j.url(),
    ]);
    let _ = fs::remove_file(&file);
    assert_eq!(o.code, 0, "{o:?}");
    let id = o
        .stdout
        .split("(trace ")
        .nth(1)
        .unwrap()
        .trim_end()
        .trim_end_matches(')')
        .to_string();
    let t = poll_until(Duration::from_secs(20), || {
        j.trace(&id)
            .filter(|t| t["spans"].as_array().map_or(0, |s| s.len()) == l.len())
    })
    .unwrap_or_else(|| panic!("Jaeger has not the trace {id} with {} spans", l.len()));
    let spans = t["spans"].as_array().unwrap();
    let key = |host: &str, seq: i64| (host.to_string(), seq);
    let by_rec: BTreeMap<(String, i64), &Value> = spans
        .iter()
        .map(|sp| {
            let p = &t["processes"][sp["processID"].as_str().unwrap()];
            let host = jaeger::jtag(&p["tags"], "host.name")
                .unwrap()
                .as_str()
                .unwrap();
            let seq = jaeger::jtag(&sp["tags"], "mantle.seq")
                .unwrap()
                .as_i64()
                .unwrap();
            (key(host, seq), sp)
        })
        .collect();
    assert_eq!(by_rec.len(), l.len(), "a span per reception");
    let mut hosts = BTreeSet::new();
    for r in l {
        let sp = by_rec[&key(s(r, "host"), u(r, "seq") as i64)];
        let p = &t["processes"][sp["processID"].as_str().unwrap()];
        assert_eq!(p["serviceName"], r["rx_comm"], "{sp}");
        assert_eq!(jaeger::jtag(&sp["tags"], "mantle.via").unwrap(), &r["via"]);
        hosts.insert(s(r, "host").to_string());
        let refs = sp["references"].as_array().cloned().unwrap_or_default();
        if s(r, "via") == "set" {
            assert!(refs.is_empty(), "{sp}");
            continue;
        }
        let parent = l
            .iter()
            .filter(|q| {
                s(q, "host") == s(r, "tx_host")
                    && if u(r, "tx_tid") == 0 {
                        // TCP carries the sending process, not its thread
                        q["rx_pid"] == r["tx_pid"]
                    } else {
                        q["rx_tid"] == r["tx_tid"]
                    }
                    && u(q, "lamport") < u(r, "lamport")
            })
            .max_by_key(|q| u(q, "lamport"))
            .unwrap_or_else(|| {
                panic!("the sender of {r} has no reception in the lifeline: {l:#?}")
            });
        let ps = by_rec[&key(s(parent, "host"), u(parent, "seq") as i64)];
        assert_eq!(refs.len(), 1, "{sp}");
        assert_eq!(refs[0]["refType"], "CHILD_OF");
        assert_eq!(refs[0]["spanID"], ps["spanID"], "parent of {r}: {parent}");
    }
    assert_eq!(hosts.len(), 3, "A, B and C: {hosts:?}");
    assert!(l
        .iter()
        .any(|r| s(r, "via") == "tcp" && s(r, "host") != s(r, "tx_host")));
}
