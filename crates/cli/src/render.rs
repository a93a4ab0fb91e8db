//! Rendering: every text table and JSON document the tags commands print.
//!
//! One schema per object, the same in every command (docs/json.md): a tag
//! is `TagInfo`, a thread is `ThreadInfo` (its tags are held tags: name and
//! TTL), a lifeline record is `ReceptionInfo` (as JSON:
//! `mantle_tags::lifeline_file::to_json`; lifelines in every format are
//! rendered by `mantle_tags::lifeline::render`). A TTL is a number of hops,
//! or null for unlimited, everywhere.

use mantle_tags::kernel::UpReport;
use mantle_tags::text::term;
use mantle_tags::{Status, TagInfo, ThreadInfo};

/// Pretty JSON on standard output, one document.
pub fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).expect("serializable"));
}

/// A thread as an unprivileged caller of `tag get` sees it: the thread
/// object without what lives in root-only task storage (the TTLs, the
/// terminators, the class), whose keys are left out rather than guessed.
#[derive(serde::Serialize)]
pub struct ThreadView {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub tags: Vec<NameOnly>,
}

#[derive(serde::Serialize)]
pub struct NameOnly {
    pub name: String,
}

/// `tag ls`: a table of tags.
pub fn tag_list(l: &[TagInfo]) {
    println!(
        "{:>3} {:<20} {:<8} {:<6} {:<6} {:>4} {:>9} {:>10} {:>6}",
        "BIT", "NAME", "STATE", "SCOPE", "CLASS", "TTL", "LIFELINE", "RECEIVED", "OWNER"
    );
    for i in l {
        println!(
            "{:>3} {:<20} {:<8} {:<6} {:<6} {:>4} {:>9} {:>10} {:>6}",
            i.bit,
            i.name,
            i.state,
            i.scope,
            if i.system { "system" } else { "user" },
            i.ttl.map(|x| x.to_string()).unwrap_or_else(|| "inf".into()),
            i.lifeline,
            i.receptions,
            i.owner_uid
                .map(|u| u.to_string())
                .unwrap_or_else(|| "-".into())
        );
    }
}

/// `tag threads`: the threads as a table or JSON.
pub fn threads(ts: &[ThreadInfo], json: bool) {
    if json {
        print_json(&ts);
        return;
    }
    println!(
        "{:>8} {:>8} {:<16} {:<6} TAGS(ttl) / TERMINATORS",
        "TID", "PID", "COMM", "CLASS"
    );
    for t in ts {
        let tags: Vec<String> = t
            .tags
            .iter()
            .map(|h| match h.ttl {
                None => term(&h.name).into_owned(),
                Some(ttl) => format!("{}({ttl})", term(&h.name)),
            })
            .collect();
        let mut line = tags.join(",");
        if !t.terminators.is_empty() {
            line += &term(&format!(" / !{}", t.terminators.join(",!")));
        }
        println!(
            "{:>8} {:>8} {:<16} {:<6} {}",
            t.tid,
            t.pid,
            term(&t.comm),
            if t.system { "system" } else { "user" },
            line
        );
    }
}

/// `tags up`: what was loaded (the cluster table's line comes first, when
/// there is one).
pub fn up(r: &UpReport, json: bool) {
    if json {
        print_json(r);
    } else {
        println!(
            "tags kernel side loaded: pinned at {}, view of {} threads, self-operations via {}, cgroup hooks at {}",
            r.pin_root, r.view_entries, r.ctl_lib, r.cgroup
        );
    }
}

/// `tags status`.
pub fn status(st: &Status, json: bool) {
    if json {
        print_json(st);
    } else if !st.loaded {
        println!("tags: not loaded (mantle tags up)");
    } else {
        println!(
            "tags: loaded, {} live tag(s), hooks {}",
            st.live_tags,
            if st.hooks_attached {
                "attached"
            } else {
                "detached (no tags)"
            }
        );
        if !st.fd_channels {
            println!("  channels:   sockets, signals, fork only (--no-fd-channels)");
        }
        println!("  view:       {} thread slots", st.view_entries);
        println!("  hops:       {} deliveries", st.hops);
        println!("  rejected:   {} (terminators, classes)", st.rejected);
        println!(
            "  late:       {} (reader faster than the sender's hook)",
            st.late
        );
        println!("  dropped:    {} (channel map full)", st.deposit_fail);
        println!("  no view:    {} (tid beyond pid_max at load)", st.no_view);
        if st.cluster_digest != 0 {
            println!("  cluster:    table digest {:04x}", st.cluster_digest);
            println!(
                "  TCP option: {} written, {} parsed, {} dropped (other cluster table), {} without room",
                st.tcp_options_written, st.tcp_options_parsed, st.tcp_options_mismatched, st.tcp_options_no_space
            );
        }
    }
}
