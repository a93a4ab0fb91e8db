//! Loading and unloading the kernel side as a whole, the way the `mantle
//! tags` commands do it: the privilege check comes first, and a cluster
//! table is installed all or nothing (if it cannot be installed, the side
//! that was just loaded is unloaded again, so that no machine runs with a
//! table other than the one it was given). [`kernel`] does the loading
//! itself; this module only orders its steps.

use crate::kernel::{self, UpOpts, UpReport};
use crate::model::ClusterTable;
use crate::{Error, Status, Tags};
use std::path::Path;

/// Why loading or unloading needs privilege, in the words of the error.
const NEED_ROOT: &str = "needs root (CAP_SYS_ADMIN or CAP_BPF in the initial user namespace)";

/// Refuses an unprivileged caller before anything is read or loaded, so
/// that it learns that first (not, say, that a file it named is missing).
pub fn may_load() -> Result<(), Error> {
    if mantle_sys::os::privileged() {
        Ok(())
    } else {
        Err(Error::Permission(format!(
            "loading the kernel side {NEED_ROOT}"
        )))
    }
}

/// Loads the kernel side with `ctl_lib` as the watched libmantle.so and,
/// with a table, installs the cluster's global tags. A failure after the
/// load unloads it again: the caller gets the error and no kernel side.
pub fn up(ctl_lib: &Path, opts: UpOpts, cluster: Option<&ClusterTable>) -> Result<UpReport, Error> {
    may_load()?;
    let report = kernel::up(ctl_lib, opts)?;
    if let Some(table) = cluster {
        // Global tags exist from the start, so their hooks must be attached
        // now (they follow "is any tag live?").
        let installed = Tags::open().and_then(|tags| {
            tags.install_cluster(table)?;
            kernel::attach_tagged()
        });
        if let Err(e) = installed {
            // Best effort: the install error is the one worth reporting.
            let _ = kernel::down();
            return Err(e);
        }
    }
    Ok(report)
}

/// Unloads the kernel side: every tag disappears, every user's.
/// [`Error::NotLoaded`] when there is nothing to unload.
pub fn down() -> Result<(), Error> {
    if !mantle_sys::os::privileged() {
        return Err(Error::Permission(format!(
            "unloading the kernel side {NEED_ROOT}"
        )));
    }
    kernel::down()
}

/// The subsystem's status; a side that is not loaded is a status
/// (`loaded: false`), not an error.
pub fn status() -> Result<Status, Error> {
    match Tags::open() {
        Ok(t) => Ok(t.status()),
        Err(Error::NotLoaded) => Ok(Status::default()),
        Err(e) => Err(e),
    }
}
