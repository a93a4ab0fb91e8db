//! Paths shared by the loader, the tools and the applications' library:
//! where the kernel side is pinned, where the table lock and the notes
//! live. Security of each is argued where it is created (crates/tags
//! kernel.rs and docs/tags.md, "Security").

/// bpffs directory of all of mantle's pins (owned by root, 0755).
pub const PIN_PARENT: &str = "/sys/fs/bpf/mantle";

/// The tags kernel side's pins: `maps/`, `progs/` (0700), `links/`. A load
/// is staged beside it (bpffs refuses '.' in names) and renamed into place.
pub const PIN_ROOT: &str = "/sys/fs/bpf/mantle/tags";

/// Root-only directory of mantle's runtime files.
pub const RUN_DIR: &str = "/run/mantle";

/// Which `libmantle.so` the self-operation uprobe is attached to (bpffs
/// holds no regular files, so this note lives in /run).
pub const LIB_NOTE: &str = "/run/mantle/tags.lib";

/// Directory of the table locks (0700: unprivileged users cannot hold or
/// squat on them).
pub const LOCK_DIR: &str = "/run/mantle/lock";

/// The tag table's writers' lock.
pub const TAGS_LOCK: &str = "/run/mantle/lock/tags.lock";

/// Held by tests and benchmarks that load the kernel side (machine-wide
/// state; see README, "Tests").
pub const KERNEL_TEST_LOCK: &str = "/run/mantle-kernel.lock";

/// The pin of object `name` of `kind` (`maps`, `progs`, `links`).
pub fn pin(kind: &str, name: &str) -> std::path::PathBuf {
    std::path::Path::new(PIN_ROOT).join(kind).join(name)
}
