//! `mantle-tags-floor`, the hooks' floor of bench/tags: `up` attaches an
//! empty program on each hook mantle uses while a tag exists, pinned where
//! only root can reach it; `down` detaches them all; a second `up` is
//! refused while one is up.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_mantle-tags-floor");
const DIR: &str = "/sys/fs/bpf/mantle-floor";
const LINKS: &[&str] = &[
    "sys_exit",
    "fork",
    "exit",
    "signal",
    "sock_send",
    "unix_queued",
    "sock_recv",
    "tcp_sendmsg",
    "sendmsg4",
    "sendmsg6",
    "sockops",
];

fn floor(arg: &str) -> std::process::Output {
    Command::new(BIN)
        .arg(arg)
        .output()
        .expect("run mantle-tags-floor")
}

#[test]
#[ignore = "needs root (attaches eBPF programs)"]
fn floor_up_down() {
    mantle_testsupport::require_root("mantle-tags-floor");
    let _lock = mantle_testsupport::lock::take_kernel_lock().expect("kernel lock");
    assert!(floor("down").status.success());
    let up = floor("up");
    assert!(
        up.status.success(),
        "up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let mode = std::fs::metadata(DIR)
        .expect("pin dir")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700, "the pins are root's alone");
    for l in LINKS {
        assert!(Path::new(DIR).join(l).exists(), "link {l} pinned");
    }
    assert_eq!(
        String::from_utf8_lossy(&floor("status").stdout).trim(),
        "up"
    );
    let again = floor("up");
    assert_eq!(again.status.code(), Some(1), "a second up is refused");
    let down = floor("down");
    assert!(
        down.status.success(),
        "down: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(!Path::new(DIR).exists());
    assert_eq!(
        String::from_utf8_lossy(&floor("status").stdout).trim(),
        "down"
    );
    assert_eq!(floor("bogus").status.code(), Some(2));
}
