//! Tests of the probes: every id once and in order, the rendering, and
//! each probe cross-checked against a second way of asking the kernel.

use super::fs::{cgroup1_freezer_mount_in, cgroup2_mount_in, unescape_mount_path, VMLINUX_BTF};
use super::isolation::in_child;
use super::sysctl::unprivileged_bpf_meaning;
use super::words::{errno_words, ENOTSUPP};
use super::*;
use libbpf_rs::ProgramType;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    crate::test_serial()
}

const ALL_IDS: &[&str] = &[
    "btf",
    "bpffs",
    "cgroup2",
    "prog_tracepoint",
    "prog_raw_tp",
    "prog_tp_btf",
    "prog_perf_event",
    "prog_uprobe",
    "prog_sockops",
    "prog_cgroup_skb",
    "prog_cgroup_connect4",
    "prog_cgroup_connect_unix",
    "prog_iter_task",
    "prog_struct_ops",
    "prog_lsm",
    "prog_fentry",
    "map_task_storage",
    "map_sk_storage",
    "map_mmapable_array",
    "tracepoints_tags",
    "map_ringbuf",
    "kprobes",
    "pmu_hardware",
    "perf_software",
    "seccomp_user_notif",
    "seccomp_sync_wake_up",
    "syscall_user_dispatch",
    "root",
    "cap_bpf",
    "cap_perfmon",
    "cap_sys_admin",
    "cap_sys_resource",
    "sysctl_unprivileged_bpf_disabled",
    "sysctl_perf_event_paranoid",
    "sysctl_perf_event_max_sample_rate",
];

#[test]
fn every_id_once_and_rendered() {
    let _g = serial();
    let r = probe_all();
    let ids: Vec<&str> = r.features.iter().map(|f| f.id).collect();
    assert_eq!(ids, ALL_IDS, "ids or their order changed");
    let text = r.render_text();
    println!("{text}");
    assert!(text.contains(&r.kernel));
    let lines: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(lines.len(), r.features.len(), "one line per feature");
    let mut cols = Vec::new();
    for (f, line) in r.features.iter().zip(&lines) {
        assert!(!f.detail.is_empty(), "{} has no detail", f.id);
        assert!(!f.needed_by.is_empty(), "{} has no needed_by", f.id);
        let mark = if f.available { "yes  " } else { "no   " };
        assert!(
            line.strip_prefix(mark)
                .is_some_and(|rest| rest.starts_with(&f.name)),
            "{}: expected {mark:?} then {:?}, got {line:?}",
            f.id,
            f.name
        );
        assert!(line.ends_with(&f.detail), "{}: detail not at the end", f.id);
        cols.push(line.len() - f.detail.len());
    }
    // Aligned: every detail starts in the same column.
    assert!(
        cols.windows(2).all(|w| w[0] == w[1]),
        "not aligned: {cols:?}"
    );
}

#[test]
fn get_finds_and_misses() {
    let r = Report {
        kernel: "x".into(),
        features: vec![Feature {
            id: "btf",
            name: "kernel BTF".into(),
            available: true,
            detail: "d".into(),
            needed_by: "all",
        }],
    };
    assert_eq!(r.get("btf").map(|f| f.available), Some(true));
    assert!(r.has("btf"));
    assert!(r.get("nope").is_none());
    assert!(!r.has("nope"));
}

#[test]
fn json_field_names() {
    let _g = serial();
    let v = serde_json::to_value(probe_all()).unwrap();
    assert!(v["kernel"].is_string());
    let f = &v["features"][0];
    for k in ["id", "name", "available", "detail", "needed_by"] {
        assert!(f.get(k).is_some(), "missing JSON field {k}");
    }
    assert_eq!(f["id"], "btf");
}

#[test]
fn btf_iff_vmlinux_exists() {
    let _g = serial();
    let r = probe_all();
    assert_eq!(
        r.get("btf").unwrap().available,
        Path::new(VMLINUX_BTF).exists()
    );
}

#[test]
fn missing_tracepoints_names_exactly_the_missing_ones() {
    let _g = serial();
    match VmlinuxBtf::load() {
        Ok(btf) => assert_eq!(
            btf.missing_tracepoints(&["sched_process_fork", "mantle_no_such_tracepoint"]),
            vec!["mantle_no_such_tracepoint"]
        ),
        // no kernel BTF here: only acceptable where btf is not there
        Err(_) => assert!(!Path::new(VMLINUX_BTF).exists()),
    }
}

#[test]
fn fast_and_leaves_no_fds() {
    let _g = serial();
    let count = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let _ = probe_all(); // warm-up: libbpf's one-time state
    let before = count();
    let t = std::time::Instant::now();
    let r = probe_all();
    let took = t.elapsed();
    assert_eq!(count(), before, "probe_all leaked file descriptors");
    assert!(
        took < std::time::Duration::from_millis(1000),
        "took {took:?}"
    );
    println!("probe_all took {took:?} for {} features", r.features.len());
}

#[test]
fn root_and_caps_agree_with_status() {
    let _g = serial();
    let r = probe_all();
    assert_eq!(r.get("root").unwrap().available, crate::os::geteuid() == 0);
    // Read CapEff differently: via the capget system call (the probes
    // parse /proc/self/status).
    let eff = crate::os::effective_caps().expect("capget");
    for (id, bit) in [
        ("cap_bpf", 39),
        ("cap_perfmon", 38),
        ("cap_sys_admin", 21),
        ("cap_sys_resource", 24),
    ] {
        assert_eq!(r.get(id).unwrap().available, eff & (1 << bit) != 0, "{id}");
    }
}

#[test]
fn cgroup2_mount_is_a_cgroup2_fs() {
    let _g = serial();
    match cgroup2_mount() {
        Some(p) => {
            let c = CString::new(p.to_str().unwrap()).unwrap();
            // SAFETY: statfs is plain old data; c is NUL-terminated.
            let mut s: libc::statfs = unsafe { std::mem::zeroed() };
            // SAFETY: c is NUL-terminated, s a valid statfs to fill.
            assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut s) }, 0);
            #[allow(clippy::unnecessary_cast)] // c_long here, c_uint elsewhere
            let magic = libc::CGROUP2_SUPER_MAGIC as i64;
            assert_eq!(s.f_type as i64, magic, "{p:?}");
        }
        None => assert!(!std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .contains(" cgroup2 ")),
    }
}

#[test]
fn cgroup2_mount_parsing() {
    let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                  cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                  cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
    assert_eq!(
        cgroup2_mount_in(hybrid),
        Some(PathBuf::from("/sys/fs/cgroup/unified"))
    );
    let unified = "cgroup2 /run/x\\040y cgroup2 rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n";
    assert_eq!(
        cgroup2_mount_in(unified),
        Some(PathBuf::from("/sys/fs/cgroup"))
    );
    let odd = "cgroup2 /run/x\\040y cgroup2 rw 0 0\n";
    assert_eq!(cgroup2_mount_in(odd), Some(PathBuf::from("/run/x y")));
    assert_eq!(cgroup2_mount_in("proc /proc proc rw 0 0\n"), None);
    assert_eq!(unescape_mount_path("a\\134b\\"), "a\\b\\");
}

#[test]
fn errno_words_are_plain() {
    assert_eq!(errno_words(libc::EPERM), "EPERM (Operation not permitted)");
    assert!(errno_words(ENOTSUPP).starts_with("ENOTSUPP"));
    assert!(errno_words(4000).starts_with("errno 4000"));
}

#[test]
fn seccomp_agrees_with_action_avail() {
    let _g = serial();
    let r = probe_all();
    // Ask the kernel differently: is the USER_NOTIF action available?
    let action: u32 = libc::SECCOMP_RET_USER_NOTIF;
    // SAFETY: the action pointer is valid for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    let direct = rc == 0;
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail") {
        assert_eq!(direct, s.split_whitespace().any(|a| a == "user_notif"));
    }
    assert_eq!(
        r.get("seccomp_user_notif").unwrap().available,
        direct,
        "{}",
        r.get("seccomp_user_notif").unwrap().detail
    );
}

static SUD_SELECTOR: AtomicU8 = AtomicU8::new(0);
static SUD_TRAPPED: AtomicU8 = AtomicU8::new(0);

extern "C" fn on_sigsys(_: libc::c_int) {
    SUD_TRAPPED.store(1, Ordering::SeqCst);
    // SYSCALL_DISPATCH_FILTER_ALLOW, so that rt_sigreturn goes through.
    SUD_SELECTOR.store(0, Ordering::SeqCst);
}

/// Really diverts a system call with SUD: 0 if the SIGSYS arrived.
fn sud_divert_child() -> i32 {
    // SAFETY: sigaction is plain old data; zeroed is a valid value.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigsys as *const () as usize;
    // SAFETY: installs a handler that only touches atomics.
    if unsafe { libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) } != 0 {
        return 10;
    }
    // SAFETY: the selector is a static, so it outlives the dispatch.
    let r = unsafe {
        libc::prctl(
            59,                 // PR_SET_SYSCALL_USER_DISPATCH, spelled out on purpose
            1 as libc::c_ulong, // PR_SYS_DISPATCH_ON
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            SUD_SELECTOR.as_ptr(),
        )
    };
    if r != 0 {
        return 11;
    }
    // SYSCALL_DISPATCH_FILTER_BLOCK: from here on system calls trap.
    SUD_SELECTOR.store(1, Ordering::SeqCst);
    // SAFETY: getppid has no arguments; here it is diverted to SIGSYS.
    unsafe { libc::syscall(libc::SYS_getppid) };
    if SUD_TRAPPED.load(Ordering::SeqCst) == 1 {
        0
    } else {
        12
    }
}

#[test]
fn sud_agrees_with_a_real_diversion() {
    let _g = serial();
    let r = probe_all();
    let direct = in_child(sud_divert_child);
    assert_eq!(
        r.get("syscall_user_dispatch").unwrap().available,
        direct == Ok(0),
        "probe: {}; direct check: {direct:?}",
        r.get("syscall_user_dispatch").unwrap().detail
    );
}

/// The plain program types, by libbpf's own probe instead of our load.
#[test]
#[ignore = "needs root (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn plain_prog_types_agree_with_libbpf_probe() {
    let _g = serial();
    mantle_testsupport::require_root("plain_prog_types_agree_with_libbpf_probe");
    let r = probe_all();
    for (id, ty) in [
        ("prog_tracepoint", ProgramType::Tracepoint),
        ("prog_raw_tp", ProgramType::RawTracepoint),
        ("prog_perf_event", ProgramType::PerfEvent),
        ("prog_sockops", ProgramType::SockOps),
        ("prog_cgroup_skb", ProgramType::CgroupSkb),
        ("prog_cgroup_connect4", ProgramType::CgroupSockAddr),
    ] {
        let lib = ty.is_supported().is_ok_and(|s| s);
        assert_eq!(
            r.get(id).unwrap().available,
            lib,
            "{id}: {}",
            r.get(id).unwrap().detail
        );
    }
}

/// As root, the things every mantle machine needs must be there, and
/// a refused program must say why in words.
#[test]
#[ignore = "needs root (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn root_sees_the_basics() {
    let _g = serial();
    mantle_testsupport::require_root("root_sees_the_basics");
    let r = probe_all();
    for id in [
        "prog_tracepoint",
        "prog_raw_tp",
        "map_mmapable_array",
        "perf_software",
    ] {
        assert!(r.has(id), "{id}: {}", r.get(id).unwrap().detail);
    }
    for f in r
        .features
        .iter()
        .filter(|f| f.id.starts_with("prog_") && !f.available)
    {
        assert!(
            f.detail.contains('(') && f.detail.contains(')'),
            "{}: errno not in words: {}",
            f.id,
            f.detail
        );
    }
}

#[test]
fn unprivileged_bpf_meaning_follows_the_kernel() {
    let v6_4 = 6 << 16 | 4 << 8;
    let v6_5 = 6 << 16 | 5 << 8;
    assert!(unprivileged_bpf_meaning(2, v6_4).contains("may use bpf(2)"));
    for v in [1, 2] {
        let m = unprivileged_bpf_meaning(v, v6_5);
        assert!(!m.contains("bpf(2)"), "{m}");
        assert!(m.contains("create maps and load programs"), "{m}");
        assert!(m.contains("pinned objects"), "{m}");
    }
}

#[test]
fn kernel_version_code_matches_release() {
    let code = kernel_version_code();
    let rel = kernel_release();
    let major = rel.split('.').next().unwrap().parse::<u32>().unwrap();
    assert_eq!(code >> 16, major);
}

/// SYNC_WAKE_UP is there exactly where seccomp user notification is and
/// the kernel is 6.6 or newer (the ioctl came with 6.6); no distribution
/// backport is known, so a disagreement is worth a look.
#[test]
fn sync_wake_up_follows_the_kernel_version() {
    let _g = serial();
    let r = probe_all();
    let notif = r.get("seccomp_user_notif").unwrap().available;
    let sync = r.get("seccomp_sync_wake_up").unwrap();
    let new_enough = super::kernel_version_code() >= (6 << 16) | (6 << 8);
    assert_eq!(sync.available, notif && new_enough, "{}", sync.detail);
}

#[test]
fn the_v1_freezer_is_found_by_its_mount_options() {
    let m = "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n\
             cgroup /sys/fs/cgroup/cpu cgroup rw,nosuid,cpu 0 0\n\
             cgroup /sys/fs/cgroup/freezer cgroup rw,nosuid,nodev,noexec,relatime,freezer 0 0\n";
    assert_eq!(
        cgroup1_freezer_mount_in(m),
        Some(std::path::PathBuf::from("/sys/fs/cgroup/freezer"))
    );
    // v2 only, or a v1 mount of other controllers: none
    assert_eq!(
        cgroup1_freezer_mount_in(
            "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\ncgroup /x cgroup rw,freezerx 0 0\n"
        ),
        None
    );
}
