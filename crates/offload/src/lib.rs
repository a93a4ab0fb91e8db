//! mantle-offload: the application kernel of Kågström's Paper III on an
//! unmodified Linux. `mantle run --offload -- COMMAND` runs a dynamically
//! linked program whose user code stays on the *application CPUs* while
//! every system call it makes is performed by a *bootstrap thread* of the
//! same process, pinned to the *bootstrap CPU*.
//!
//! Mechanism (docs/offload.md): a preloaded library
//! (`lib/offload.c`, built by build.rs like the fast path's stub)
//! overrides `__libc_start_main`; before the program's `main` it starts
//! one bootstrap thread per application thread and turns on Syscall User
//! Dispatch for the application thread, whose calls then trap into a
//! SIGSYS handler that writes them into the shared area (the layout of the
//! paper's Figure 4.3, [`mantle_abi::offload`]) and waits; the bootstrap
//! thread performs the call and answers. Which thread performs which call
//! is the pure policy of [`placement`], compiled into the library.
//!
//! This crate holds what runs before the program: the configuration
//! ([`Cpus`]: which CPU is the bootstrap CPU, which are the application
//! CPUs, checked against the online CPUs and the cpuset), the checks of
//! the command (dynamically linked: the library cannot be preloaded into a
//! static program), and the environment that makes the program load the
//! library ([`command_env`]). The CLI then replaces itself with the
//! program, so the program's exit (a status or a signal) is the command's.
//!
//! Invariants: the pure parts ([`Cpus::choose`], [`parse_cpu_list`],
//! [`placement`]) make no system calls; [`online_cpus`] and
//! [`allowed_cpus`] read the machine. No threads, no locks.

pub mod placement;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Why an offloaded run cannot start.
#[derive(Debug, thiserror::Error)]
pub enum OffloadError {
    /// The bootstrap CPU is not online (a usage error).
    #[error("CPU {0} is not online (online: {1})")]
    Offline(u32, String),
    /// The bootstrap CPU is online but this process may not run there
    /// (cpuset, affinity): a usage error.
    #[error("CPU {0} is not allowed by this process's cpuset or affinity (allowed: {1})")]
    NotAllowed(u32, String),
    /// No CPU is left for the application threads.
    #[error("no application CPU left: the allowed CPUs are {0}, and {1} is the bootstrap CPU (give --app-cpus to share it)")]
    NoAppCpu(String, u32),
    /// An application CPU that is not online or not allowed.
    #[error("application CPU {0} is not online or not allowed (allowed: {1})")]
    BadAppCpu(u32, String),
    /// A CPU list that does not parse.
    #[error("bad CPU list {0:?} (numbers and ranges: 1,3-5)")]
    BadList(String),
    /// The command is statically linked: nothing can be preloaded.
    #[error("{0} is statically linked: --offload preloads a library into the program, so it needs a dynamically linked program")]
    Static(PathBuf),
    /// Reading the machine's CPUs or the command failed.
    #[error("{what}: {err}")]
    Os {
        what: &'static str,
        #[source]
        err: std::io::Error,
    },
    #[error(transparent)]
    Exec(#[from] mantle_exec::fast::FastError),
}

/// The CPUs of an offloaded run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpus {
    /// The bootstrap CPU: every bootstrap thread runs here.
    pub boot: u32,
    /// The application CPUs: the program's threads run here.
    pub app: BTreeSet<u32>,
}

impl Cpus {
    /// The CPUs of a run (pure): `boot` (default: the lowest allowed CPU,
    /// as the paper's bootstrap processor is CPU 0) must be online and
    /// allowed; the application CPUs are `app` if given (each online and
    /// allowed; it may include the bootstrap CPU), else every allowed CPU
    /// but the bootstrap CPU.
    pub fn choose(
        boot: Option<u32>,
        app: Option<&BTreeSet<u32>>,
        online: &BTreeSet<u32>,
        allowed: &BTreeSet<u32>,
    ) -> Result<Cpus, OffloadError> {
        let usable: BTreeSet<u32> = online.intersection(allowed).copied().collect();
        let boot = match boot {
            Some(b) => b,
            None => *usable
                .iter()
                .next()
                .ok_or_else(|| OffloadError::NotAllowed(0, format_cpu_list(allowed)))?,
        };
        if !online.contains(&boot) {
            return Err(OffloadError::Offline(boot, format_cpu_list(online)));
        }
        if !allowed.contains(&boot) {
            return Err(OffloadError::NotAllowed(boot, format_cpu_list(allowed)));
        }
        let app = match app {
            Some(a) => {
                if let Some(bad) = a.iter().find(|c| !usable.contains(c)) {
                    return Err(OffloadError::BadAppCpu(*bad, format_cpu_list(&usable)));
                }
                a.clone()
            }
            None => usable.iter().copied().filter(|&c| c != boot).collect(),
        };
        if app.is_empty() {
            return Err(OffloadError::NoAppCpu(format_cpu_list(&usable), boot));
        }
        Ok(Cpus { boot, app })
    }

    /// The library's configuration, `MANTLE_OFFLOAD="BOOT:APPS"`.
    pub fn env_value(&self) -> String {
        format!("{}:{}", self.boot, format_cpu_list(&self.app))
    }
}

/// Parses a CPU list as the kernel writes it (`0-3,5`); pure.
pub fn parse_cpu_list(s: &str) -> Result<BTreeSet<u32>, OffloadError> {
    let bad = || OffloadError::BadList(s.to_string());
    let mut out = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: u32 = a.parse().map_err(|_| bad())?;
        let b: u32 = b.parse().map_err(|_| bad())?;
        if b < a || b >= 1024 {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// Formats a CPU set as the kernel does (`0-3,5`); pure.
pub fn format_cpu_list(s: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut it = s.iter().copied().peekable();
    while let Some(a) = it.next() {
        let mut b = a;
        while it.peek() == Some(&(b + 1)) {
            b = it.next().unwrap_or(b);
        }
        parts.push(if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        });
    }
    parts.join(",")
}

/// The online CPUs (/sys/devices/system/cpu/online).
pub fn online_cpus() -> Result<BTreeSet<u32>, OffloadError> {
    let t = std::fs::read_to_string("/sys/devices/system/cpu/online").map_err(|err| {
        OffloadError::Os {
            what: "read /sys/devices/system/cpu/online",
            err,
        }
    })?;
    parse_cpu_list(&t)
}

/// The CPUs this process may run on (its affinity, which the cpuset
/// bounds).
pub fn allowed_cpus() -> Result<BTreeSet<u32>, OffloadError> {
    mantle_sys::os::allowed_cpus()
        .map(|v| v.into_iter().collect())
        .map_err(|err| OffloadError::Os {
            what: "sched_getaffinity",
            err,
        })
}

/// The preloaded library: `MANTLE_OFFLOAD_LIB`, else the one built with
/// this crate.
pub fn library() -> PathBuf {
    std::env::var_os("MANTLE_OFFLOAD_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("MANTLE_OFFLOAD_LIB_BUILT")))
}

/// Refuses a statically linked executable (a script or another non-ELF
/// file passes: its interpreter is what runs).
pub fn check_program(exe: &Path) -> Result<(), OffloadError> {
    match mantle_exec::fast::is_dynamic(exe) {
        Ok(true) | Err(mantle_exec::fast::FastError::NotElf(_)) => Ok(()),
        Ok(false) => Err(OffloadError::Static(exe.to_path_buf())),
        Err(e) => Err(e.into()),
    }
}

/// The environment variables to set for the program: the library first
/// in `LD_PRELOAD` (after what was there), and its configuration.
pub fn command_env(cpus: &Cpus, lib: &Path) -> Vec<(&'static str, OsString)> {
    let mut pre = OsString::from(lib.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        pre.push(":");
        pre.push(old);
    }
    vec![
        ("LD_PRELOAD", pre),
        ("MANTLE_OFFLOAD", OsString::from(cpus.env_value())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> BTreeSet<u32> {
        parse_cpu_list(s).unwrap()
    }

    #[test]
    fn cpu_lists_round_trip() {
        for s in ["0", "0-1", "0,2-5,7", "3-4,9"] {
            assert_eq!(format_cpu_list(&set(s)), s);
        }
        assert_eq!(set("0-1\n"), set("0,1"));
        for bad in ["", "a", "3-1", "1-", "2000", "-1"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn default_is_lowest_boot_and_the_rest_for_the_program() {
        let c = Cpus::choose(None, None, &set("0-3"), &set("0-3")).unwrap();
        assert_eq!((c.boot, c.env_value()), (0, "0:1-3".to_string()));
        let c = Cpus::choose(Some(2), None, &set("0-3"), &set("1-3")).unwrap();
        assert_eq!(c.env_value(), "2:1,3");
    }

    #[test]
    fn offline_and_disallowed_boot_cpus_are_refused() {
        assert!(matches!(
            Cpus::choose(Some(7), None, &set("0-1"), &set("0-1")),
            Err(OffloadError::Offline(7, _))
        ));
        assert!(matches!(
            Cpus::choose(Some(1), None, &set("0-1"), &set("0")),
            Err(OffloadError::NotAllowed(1, _))
        ));
        assert!(matches!(
            Cpus::choose(Some(0), None, &set("0-1"), &set("0")),
            Err(OffloadError::NoAppCpu(_, 0))
        ));
    }

    #[test]
    fn app_cpus_may_share_the_boot_cpu_when_asked() {
        let c = Cpus::choose(Some(0), Some(&set("0-1")), &set("0-1"), &set("0-1")).unwrap();
        assert_eq!(c.env_value(), "0:0-1");
        assert!(matches!(
            Cpus::choose(Some(0), Some(&set("5")), &set("0-1"), &set("0-1")),
            Err(OffloadError::BadAppCpu(5, _))
        ));
    }
}
