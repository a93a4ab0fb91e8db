//! Integration tests (root) for three correctness fixes of the tags kernel
//! side and lifelines (issue 8, items 8, 10 and 11), with real processes:
//!
//! * every bit of the tag table carries itself: a request from a holder of
//!   the tag on bit b gives the reader that tag, and deleting it frees it
//!   (a wrong ctz64 constant swapped bits 42..48 with 50..56);
//! * a zombie cannot take a tag, so no tag is left behind in its tid's view
//!   slot once it is reaped;
//! * a local lifeline lists receptions in the order they happened, and a
//!   shared mapping that gives a thread nothing new is not a reception.
//!
//! The actors are tests/actors/actor.c, driven as in tests/tags.rs (commands
//! on stdin, reports in a regular file; the test process is never tagged).
//! The binary holds /run/mantle-kernel.lock for its life, loads the kernel
//! side once and unloads it at exit; its tests run one at a time (one fills
//! the whole table). They need root, so they are ignored (with the reason)
//! unless included; included without root or a loadable kernel side, they
//! fail saying what is missing. The harness is mantle-testsupport.

use mantle_testsupport::actor::{pass_fds, pipe, socketpair, Actor};
use mantle_testsupport::cli::{
    json, lifeline, mantle, mantle_ok, set_of, tags_of, test_process_tags,
};
use mantle_testsupport::kernel::{self, Loaded, Spec};
use mantle_testsupport::poll_until;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// The kernel side this binary loads, with the one actor its tests start.
const SPEC: Spec = Spec {
    name: "tags-bits",
    actors: &["actor"],
};

/// One test at a time: one fills the whole table.
static SERIAL: Mutex<()> = Mutex::new(());

/// The loaded kernel side and this test's turn; fails the test, saying
/// what is missing, when the kernel side cannot be loaded here.
#[track_caller]
fn env() -> (&'static Loaded, MutexGuard<'static, ()>) {
    let turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    (kernel::loaded(&SPEC), turn)
}

/// The tags in view slot `tid` itself, read through the library: the CLI
/// answers only for threads that exist, and the slot of one that is gone
/// is what must be empty.
#[track_caller]
fn slot_of(tid: u32) -> BTreeSet<String> {
    mantle_tags::Tags::open()
        .and_then(|t| t.vector_of(tid))
        .unwrap_or_else(|e| panic!("read view slot {tid}: {e}"))
        .into_iter()
        .collect()
}

/// The TTL thread `tid` holds `tag` with (`tag threads`; unlimited is
/// null), if it holds it.
#[track_caller]
fn ttl_of(tag: &str, tid: u32) -> Option<Value> {
    let threads: Vec<Value> = json(&["tag", "threads", tag, "--json"]);
    let t = threads.iter().find(|t| t["tid"] == tid)?;
    let held = t["tags"].as_array()?.iter().find(|p| p["name"] == tag)?;
    Some(held["ttl"].clone())
}

/// The tags a test made, deleted when it ends (on failure too).
struct Tags(Vec<String>);

impl Tags {
    #[track_caller]
    fn create(&mut self, name: &str, opts: &[&str]) -> String {
        let mut args = vec!["tag", "create", name];
        args.extend_from_slice(opts);
        mantle_ok(&args);
        self.0.push(name.to_string());
        name.to_string()
    }
}

impl Drop for Tags {
    fn drop(&mut self) {
        for t in &self.0 {
            let _ = mantle(&["tag", "delete", t]);
        }
    }
}

/// Starts an actor (tests/actors/actor.c) with one worker; `fds`: (our fd,
/// its fd number).
fn spawn(env: &Loaded, name: &str, fds: &[(&OwnedFd, RawFd)]) -> Actor {
    let mut cmd = Command::new(env.bin("actor"));
    cmd.arg("1");
    let fds: Vec<(RawFd, RawFd)> = fds.iter().map(|(f, d)| (f.as_raw_fd(), *d)).collect();
    pass_fds(&mut cmd, &fds);
    Actor::spawn(&env.dir, name, cmd)
}

/// An actor holding `ours` of a fresh pipe as its channel `p`.
fn actor_on_pipe(env: &Loaded, name: &str, ours: &OwnedFd) -> Actor {
    let mut a = spawn(env, name, &[(ours, 100)]);
    a.run(0, "adopt p 100");
    a
}

/// A writer and a reader joined by a new pipe, each holding its end as "p".
fn pipe_pair(env: &Loaded, writer: &str, reader: &str) -> (Actor, Actor) {
    let (pr, pw) = pipe();
    (
        actor_on_pipe(env, writer, &pw),
        actor_on_pipe(env, reader, &pr),
    )
}

/// Threads of the test process itself must never hold a tag: it would tag
/// every actor it starts afterwards.
#[track_caller]
fn assert_test_process_untagged() {
    let tagged = test_process_tags();
    assert!(tagged.is_empty(), "the test process was tagged: {tagged:?}");
}

// ================================================================= tests

/// Fills the table, so every local bit is in use; then, tag by tag, a
/// holder sends a request over a pipe to a fresh reader, which must hold
/// exactly that tag (and the tag's lifeline must record exactly that); then
/// every tag is deleted, in bit order while the later ones still live, and
/// each must be freed. With the wrong de Bruijn constant in ctz64, bits
/// 42..48 were delivered (and freed) as 50..56 and the other way round.
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn every_bit_is_delivered_as_itself_and_freed() {
    let (env, _turn) = env();
    let mut made = Tags(Vec::new());
    let refusal = loop {
        assert!(made.0.len() <= 1024, "the table never filled");
        let name = format!("bits.t{}", made.0.len());
        let o = mantle(&["tag", "create", &name, "--lifeline", "8"]);
        if o.code != 0 {
            break o;
        }
        made.0.push(name);
    };
    assert!(refusal.stderr.contains("table is full"), "{refusal:?}");
    let ls: Vec<Value> = json(&["tag", "ls", "--json"]);
    let bit_of: BTreeMap<String, u64> = ls
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["bit"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut ours: Vec<(u64, String)> = made.0.iter().map(|n| (bit_of[n], n.clone())).collect();
    ours.sort();
    let local = mantle_tags::abi::MT_GLOBAL_BITS as u64..mantle_tags::abi::MT_TAGS as u64;
    assert_eq!(
        ours.iter().map(|(b, _)| *b).collect::<Vec<_>>(),
        local.collect::<Vec<_>>(),
        "this test's tags must take every local bit (another tag was in the table: {ls:?})"
    );

    let mut wrong = Vec::new();
    for (bit, name) in &ours {
        let (mut holder, mut reader) =
            pipe_pair(env, &format!("holder{bit}"), &format!("reader{bit}"));
        mantle_ok(&["tag", "set", name, "--tid", &holder.w[0].to_string()]);
        holder.run(0, "send p request");
        assert_eq!(reader.run(0, "recv p"), "request");
        let got = tags_of(reader.w[0]);
        // (via, receiver, sender); the sender of a "set" is the mantle
        // command that set it, which is gone: not compared.
        let records: Vec<(String, u64, u64)> = lifeline(name)
            .iter()
            .map(|r| {
                let via = r["via"].as_str().unwrap().to_string();
                let tx = if via == "set" {
                    0
                } else {
                    r["tx_tid"].as_u64().unwrap()
                };
                (via, r["rx_tid"].as_u64().unwrap(), tx)
            })
            .collect();
        let (h, r) = (holder.w[0] as u64, reader.w[0] as u64);
        let want_records = vec![("set".to_string(), h, 0), ("pipe".to_string(), r, h)];
        if got != set_of(&[name]) || records != want_records {
            wrong.push(format!(
                "bit {bit} ({name}): reader holds {got:?}; lifeline {records:?} (want {want_records:?})"
            ));
        }
    }
    assert_test_process_untagged();

    let mut not_freed = Vec::new();
    for (bit, name) in &ours {
        let o = mantle(&["tag", "delete", name]);
        if o.code != 0 {
            not_freed.push(format!("bit {bit} ({name}): {}", o.stderr.trim()));
        }
    }
    let ls: Vec<Value> = json(&["tag", "ls", "--json"]);
    let left: Vec<String> = ls
        .iter()
        .filter(|t| made.0.iter().any(|n| t["name"] == n.as_str()))
        .map(|t| format!("{} bit {} {}", t["name"], t["bit"], t["state"]))
        .collect();
    assert!(
        wrong.is_empty() && not_freed.is_empty() && left.is_empty(),
        "requests delivered as another tag:\n{}\ndeletions that failed:\n{}\nstill in the table: {left:?}",
        wrong.join("\n"),
        not_freed.join("\n")
    );
    made.0.clear();
    // Every bit is free again: the table takes as many tags as before.
    for (bit, _) in &ours {
        made.create(&format!("bits.again{bit}"), &[]);
    }
}

/// The fast paths (issue 15: `rx_fast`, a reception that changes nothing
/// skips the task storage) must forget what an operation changed: a reader
/// that holds a tag with an unlimited TTL, received over a pipe, and whose
/// TTL root then lowers to 2, is back at unlimited after the next request
/// (a reception keeps the larger TTL). Were the fast path to trust what it
/// knew before the operation, the reader would stay at 2.
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn fast_path_forgets_what_an_operation_changed() {
    let (env, _turn) = env();
    let mut tags = Tags(Vec::new());
    let t = tags.create("bits.fast", &[]);
    let (mut holder, mut reader) = pipe_pair(env, "fastholder", "fastreader");
    mantle_ok(&["tag", "set", &t, "--tid", &holder.w[0].to_string()]);
    // the first reception takes the slow path and primes the fast one; the
    // next ones take the fast path
    for _ in 0..3 {
        holder.run(0, "send p request");
        assert_eq!(reader.run(0, "recv p"), "request");
    }
    let r = reader.w[0];
    assert_eq!(
        ttl_of(&t, r),
        Some(Value::Null),
        "unlimited after the requests"
    );
    let rs = r.to_string();
    mantle_ok(&["tag", "set", &t, "--tid", &rs, "--ttl", "2"]);
    assert_eq!(ttl_of(&t, r), Some(Value::from(2)), "root lowered it");
    holder.run(0, "send p request");
    assert_eq!(reader.run(0, "recv p"), "request");
    assert_eq!(
        ttl_of(&t, r),
        Some(Value::Null),
        "the request's unlimited TTL is larger than the 2 set meanwhile"
    );
    assert_test_process_untagged();
}

/// A lifeline reception on the fast path (issue 15: the receiver already
/// holds the tag with an unlimited TTL) makes its record without a helper
/// for `current`: the receiving task comes from the system call's
/// registers. Every record must still name the reader, its process and its
/// comm, the sender, and carry a growing clock. The first reception takes
/// the slow path; the later ones the fast one. Both ways a receiver reaches
/// the record are covered: the fd channels' (a pipe: the task found from
/// the registers) and the sockets' (a unix stream: the helper's task).
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn fast_lifeline_records_name_the_receiver() {
    let (env, _turn) = env();
    let mut tags = Tags(Vec::new());
    let t = tags.create("bits.fastll", &["--lifeline", "64"]);
    let (mut holder, mut reader) = pipe_pair(env, "llholder", "llreader");
    mantle_ok(&["tag", "set", &t, "--tid", &holder.w[0].to_string()]);
    let n = 5;
    for i in 0..n {
        holder.run(0, &format!("send p m{i}"));
        assert_eq!(reader.run(0, "recv p"), format!("m{i}"));
    }
    let (r, rp) = (reader.w[0], reader.pid);
    let comm = fs::read_to_string(format!("/proc/{rp}/task/{r}/comm")).unwrap();
    let ll = lifeline(&t);
    let mine: Vec<&Value> = ll.iter().filter(|x| x["rx_tid"] == r).collect();
    assert_eq!(mine.len(), n, "one record per reception: {ll:#?}");
    for x in &mine {
        assert_eq!(x["rx_pid"], rp, "receiver's process: {x}");
        assert_eq!(x["rx_comm"], comm.trim_end(), "receiver's comm: {x}");
        assert_eq!(x["tx_tid"], holder.w[0], "sender: {x}");
        assert_eq!(x["tx_pid"], holder.pid, "sender's process: {x}");
        assert_eq!(x["via"], "pipe", "channel: {x}");
    }
    let clocks: Vec<u64> = mine
        .iter()
        .map(|x| x["lamport"].as_u64().unwrap())
        .collect();
    assert!(
        clocks.windows(2).all(|w| w[0] < w[1]),
        "the reader's clock grows with every recorded reception: {clocks:?}"
    );

    // The same over a unix stream socket, the connect() side sending.
    let tu = tags.create("bits.fastllu", &["--lifeline", "64"]);
    let sock = env.dir.join("fastll.sock");
    let sock = sock.to_str().unwrap();
    reader.run(0, &format!("listen_unix l {sock} stream"));
    holder.run(0, &format!("connect_unix s {sock} stream"));
    reader.run(0, "accept c l");
    mantle_ok(&["tag", "set", &tu, "--tid", &holder.w[0].to_string()]);
    for i in 0..n {
        holder.run(0, &format!("send s u{i}"));
        assert_eq!(reader.run(0, "recv c"), format!("u{i}"));
    }
    let ll = lifeline(&tu);
    let mine: Vec<&Value> = ll.iter().filter(|x| x["rx_tid"] == r).collect();
    assert_eq!(mine.len(), n, "one record per unix reception: {ll:#?}");
    for x in &mine {
        assert_eq!(x["rx_pid"], rp, "receiver's process: {x}");
        assert_eq!(x["rx_comm"], comm.trim_end(), "receiver's comm: {x}");
        assert_eq!(x["tx_tid"], holder.w[0], "sender: {x}");
        assert_eq!(x["via"], "unix-stream", "channel: {x}");
    }
    assert_test_process_untagged();
}

/// The receptions and sends made inline (issue 15, sixth session: no
/// global call for a reader that holds every tag of the deposit already,
/// nor for a sender whose channel owns its fd slot) keep the deposit's
/// rules: a reception that leaves the channel empty ends the deposit, so a
/// later untagged message gives its reader nothing; and an inline send
/// deposits, so a new reader of its message takes the tag. Four actors on
/// one channel, for every channel with an inline path (a pipe, a unix
/// stream socketpair, a POSIX message queue, an eventfd): the tagged
/// holder and its first reader, an untagged writer and a second reader.
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn inline_hops_end_and_make_deposits() {
    let (env, _turn) = env();
    let mut tags = Tags(Vec::new());
    for via in ["pipe", "unix", "mq", "eventfd"] {
        let t = tags.create(&format!("bits.inline{via}"), &[]);
        let names = ["holder", "first", "other", "second"].map(|r| format!("in{via}{r}"));
        // every actor holds the channel as "p"; writers first and third
        let [mut holder, mut first, mut other, mut second] = match via {
            "pipe" | "unix" => {
                let (rd, wr) = if via == "pipe" {
                    pipe()
                } else {
                    socketpair(libc::SOCK_STREAM)
                };
                let ends = [&wr, &rd, &wr, &rd];
                [0, 1, 2, 3].map(|i| actor_on_pipe(env, &names[i], ends[i]))
            }
            "eventfd" => {
                // SAFETY: eventfd(2) returns a new fd or -1.
                let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
                assert!(efd >= 0, "eventfd: {}", std::io::Error::last_os_error());
                // SAFETY: efd is a fresh fd nobody else owns.
                let efd = unsafe { OwnedFd::from_raw_fd(efd) };
                [0, 1, 2, 3].map(|i| actor_on_pipe(env, &names[i], &efd))
            }
            _ => {
                let path = format!("/mantle-bits-{}", std::process::id());
                let actors = [0, 1, 2, 3].map(|i| {
                    let mut a = spawn(env, &names[i], &[]);
                    a.run(0, &format!("mq_open p {path}"));
                    a
                });
                let cpath = std::ffi::CString::new(path).unwrap();
                // SAFETY: plain libc call with a NUL-terminated name.
                unsafe { libc::mq_unlink(cpath.as_ptr()) };
                actors
            }
        };
        let send = |a: &mut Actor, text: &str| match via {
            "mq" => a.run(0, &format!("mq_send p {text}")),
            "eventfd" => a.run(0, "efd_write p 1"),
            _ => a.run(0, &format!("send p {text}")),
        };
        let recv = |a: &mut Actor, text: &str| {
            let (cmd, want) = match via {
                "mq" => ("mq_recv p", text),
                "eventfd" => ("efd_read p", "1"),
                _ => ("recv p", text),
            };
            assert_eq!(a.run(0, cmd), want, "{via}");
        };
        mantle_ok(&["tag", "set", &t, "--tid", &holder.w[0].to_string()]);
        // the first message gives the first reader the tag (deliver); the
        // next ones are inline hops
        for i in 0..3 {
            send(&mut holder, &format!("m{i}"));
            recv(&mut first, &format!("m{i}"));
        }
        assert_eq!(
            tags_of(first.w[0]),
            set_of(&[&t]),
            "{via}: the first reader"
        );
        send(&mut other, "u");
        recv(&mut second, "u");
        assert!(
            tags_of(second.w[0]).is_empty(),
            "{via}: an untagged message after an inline reception that emptied the channel gave its reader {:?}",
            tags_of(second.w[0])
        );
        send(&mut holder, "m3");
        recv(&mut second, "m3");
        assert_eq!(
            tags_of(second.w[0]),
            set_of(&[&t]),
            "{via}: the reader of an inline send"
        );
    }
    assert_test_process_untagged();
}

/// A message that carries two lifeline tags is one reception: both tags'
/// records of it carry the same time (the clock is read once per event,
/// issue 15), and a later reception a later one. The first message takes
/// the reader's slow path (deliver), the others the fast one.
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn one_reception_is_one_time_in_every_lifeline() {
    let (env, _turn) = env();
    let mut tags = Tags(Vec::new());
    let t1 = tags.create("bits.time1", &["--lifeline", "64"]);
    let t2 = tags.create("bits.time2", &["--lifeline", "64"]);
    let (mut holder, mut reader) = pipe_pair(env, "tmholder", "tmreader");
    for t in [&t1, &t2] {
        mantle_ok(&["tag", "set", t, "--tid", &holder.w[0].to_string()]);
    }
    let n = 4;
    for i in 0..n {
        holder.run(0, &format!("send p m{i}"));
        assert_eq!(reader.run(0, "recv p"), format!("m{i}"));
    }
    // the reader, holding both tags now, forks: one more event, recorded
    // in both lifelines (the fork hook's path)
    let kid: u32 = reader.run(0, "fork_child kid").parse().unwrap();
    reader.run(0, "release kid");
    reader.run(0, &format!("waitpid {kid}"));
    let r = reader.w[0];
    let times = |t: &str, rx: u32, count: usize| -> Vec<u64> {
        let ll = lifeline(t);
        let v: Vec<u64> = ll
            .iter()
            .filter(|x| x["rx_tid"] == rx)
            .map(|x| x["ts_ns"].as_u64().unwrap())
            .collect();
        assert_eq!(v.len(), count, "records of {rx} in {t}: {ll:#?}");
        v
    };
    let (a, b) = (times(&t1, r, n), times(&t2, r, n));
    assert_eq!(
        a, b,
        "the two tags' records of each reception carry one time"
    );
    assert!(
        a[0] > 0 && a.windows(2).all(|w| w[0] < w[1]),
        "times grow from one reception to the next: {a:?}"
    );
    let (fa, fb) = (times(&t1, kid, 1), times(&t2, kid, 1));
    assert_eq!(fa, fb, "the two tags' records of the fork carry one time");
    assert!(
        fa[0] > a[n - 1],
        "the fork came after the receptions: {fa:?} {a:?}"
    );
    assert_test_process_untagged();
}

/// A zombie (exited, not yet reaped) has run its exit hook, which cleared
/// its view slot; a tag set on it then would stay in the slot after it is
/// reaped (the deletion sweep only visits live tasks). Setting a tag on a
/// zombie is refused as "no such thread", and the slot stays empty.
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn a_zombie_cannot_take_a_tag() {
    let (env, _turn) = env();
    let mut tags = Tags(Vec::new());
    let t = tags.create("bits.zombie", &[]);
    let mut parent = spawn(env, "parent", &[]);
    let z: u32 = parent.run(0, "fork_child kid").parse().unwrap();
    parent.run(0, "release kid");
    let state = || -> Option<String> {
        let st = fs::read_to_string(format!("/proc/{z}/stat")).ok()?;
        Some(
            st.rsplit(')')
                .next()?
                .split_whitespace()
                .next()?
                .to_string(),
        )
    };
    poll_until(|| (state().as_deref() == Some("Z")).then_some(()))
        .unwrap_or_else(|| panic!("child {z} never became a zombie: {:?}", state()));

    let by_tid = mantle(&["tag", "set", &t, "--tid", &z.to_string()]);
    let by_pid = mantle(&["tag", "set", &t, "--pid", &z.to_string()]);
    let slot_while_zombie = slot_of(z);
    parent.run(0, &format!("waitpid {z}"));
    assert!(state().is_none(), "child {z} was reaped");
    let slot_after_reap = slot_of(z);

    let mut problems = Vec::new();
    for (how, o) in [("--tid", &by_tid), ("--pid", &by_pid)] {
        if o.code != 5 || !o.stderr.contains("no such thread") {
            problems.push(format!(
                "tag set {how} on the zombie was not refused as not found: {o:?}"
            ));
        }
    }
    if !slot_while_zombie.is_empty() {
        problems.push(format!("slot while a zombie: {slot_while_zombie:?}"));
    }
    if !slot_after_reap.is_empty() {
        problems.push(format!("slot after reaping: {slot_after_reap:?}"));
    }
    assert!(problems.is_empty(), "zombie {z}:\n{}", problems.join("\n"));
    // A live process still takes it (the refusal is for the dead only).
    mantle_ok(&["tag", "set", &t, "--pid", &parent.pid.to_string()]);
    assert_eq!(tags_of(parent.w[0]), set_of(&[&t]));
}

/// `tag lifeline` lists a local tag's receptions as they happened (by the
/// ring's sequence number), not by Lamport clock: A is given the tag, A ->
/// B, B -> C, then A -> D. D's clock (A's 3rd event + 1 = 4) is below C's
/// (5), yet D got the tag last.
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn local_lifeline_is_in_reception_order() {
    let (env, _turn) = env();
    let mut tags = Tags(Vec::new());
    let t = tags.create("bits.order", &["--lifeline", "64"]);
    let (ab_r, ab_w) = pipe();
    let (bc_r, bc_w) = pipe();
    let (ad_r, ad_w) = pipe();
    let mut a = spawn(env, "A", &[(&ab_w, 100), (&ad_w, 101)]);
    let mut b = spawn(env, "B", &[(&ab_r, 100), (&bc_w, 101)]);
    let mut c = actor_on_pipe(env, "C", &bc_r);
    let mut d = actor_on_pipe(env, "D", &ad_r);
    drop((ab_r, ab_w, bc_r, bc_w, ad_r, ad_w));
    a.run(0, "adopt ab 100");
    a.run(0, "adopt ad 101");
    b.run(0, "adopt ab 100");
    b.run(0, "adopt bc 101");

    mantle_ok(&["tag", "set", &t, "--tid", &a.w[0].to_string()]);
    a.run(0, "send ab m1");
    assert_eq!(b.run(0, "recv ab"), "m1");
    b.run(0, "send bc m2");
    assert_eq!(c.run(0, "recv p"), "m2");
    a.run(0, "send ad m3");
    assert_eq!(d.run(0, "recv p"), "m3");

    let ll = lifeline(&t);
    let rx: Vec<u64> = ll.iter().map(|r| r["rx_tid"].as_u64().unwrap()).collect();
    let seq: Vec<u64> = ll.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    let lamport: Vec<u64> = ll.iter().map(|r| r["lamport"].as_u64().unwrap()).collect();
    let want: Vec<u64> = [&a, &b, &c, &d].iter().map(|x| x.w[0] as u64).collect();
    assert_eq!(rx, want, "receivers in the order they got the tag: {ll:#?}");
    assert!(
        seq.windows(2).all(|w| w[0] < w[1]),
        "sequence numbers out of order: {seq:?}"
    );
    // What makes the case: the clocks themselves are not in that order.
    assert!(
        lamport[3] < lamport[2],
        "the scenario expects D's clock below C's: {lamport:?}"
    );
    assert_test_process_untagged();
}

/// A thread that maps a tagged shared object receives its tags once: a
/// mapping of a tag the thread already holds is not a reception, so a
/// process that maps a memfd many times appears once in the lifeline. Such
/// a mapping still raises a lower TTL (it is applied, just not recorded).
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn a_mapping_that_brings_nothing_new_is_not_a_reception() {
    let (env, _turn) = env();
    let mut tags = Tags(Vec::new());
    let t = tags.create("bits.shm", &["--lifeline", "64"]);
    let mut a = spawn(env, "shmA", &[]);
    let mut b = spawn(env, "shmB", &[]);
    mantle_ok(&["tag", "set", &t, "--tid", &a.w[0].to_string(), "--ttl", "5"]);
    let fd = a.run(0, "memfd mf");
    let fd2 = a.run(0, "memfd mf2");
    b.run(0, &format!("open_rw mf /proc/{}/fd/{fd}", a.pid));
    b.run(0, &format!("open_rw mf2 /proc/{}/fd/{fd2}", a.pid));
    let shm_records = |who: u32| -> Vec<u64> {
        lifeline(&t)
            .iter()
            .filter(|r| r["via"] == "shm" && r["rx_tid"] == who)
            .map(|r| r["ttl"].as_u64().unwrap())
            .collect()
    };

    b.run(0, "map mf shared");
    assert_eq!(tags_of(b.w[0]), set_of(&[&t]));
    b.run(0, "map mf shared");
    b.run(0, "map mf shared");
    b.run(0, "map mf2 shared");
    assert_eq!(
        shm_records(b.w[0]),
        vec![4],
        "B mapped two objects of A's four times: one reception (TTL 5 - 1)"
    );
    // B's TTL drops to 1; the next mapping gives it 4 again, unrecorded.
    mantle_ok(&["tag", "set", &t, "--tid", &b.w[0].to_string(), "--ttl", "1"]);
    b.run(0, "map mf shared");
    assert_eq!(
        ttl_of(&t, b.w[0]),
        Some(Value::from(4)),
        "B's TTL after mapping again"
    );
    assert_eq!(shm_records(b.w[0]), vec![4], "lifeline of {t}");
    assert_test_process_untagged();
}
