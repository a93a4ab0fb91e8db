//! Creating a tag that expires: two kernel operations (create, then arm
//! the expiry timer) that succeed or fail as one, so that a tag whose
//! timer cannot be armed does not live on forever.

use crate::{CreateOpts, Error, TagInfo, Tags};

/// Creates tag `name`; with `expire_ms`, a kernel timer retires it after
/// that long. If the timer cannot be armed the tag is deleted again.
pub fn create(
    t: &Tags,
    name: &str,
    opts: &CreateOpts,
    expire_ms: Option<u32>,
) -> Result<TagInfo, Error> {
    let info = t.create(name, opts)?;
    if let Some(ms) = expire_ms {
        if let Err(e) = t.expire_after(name, ms) {
            // Best effort: the timer's error is the one worth reporting.
            let _ = t.delete(name);
            return Err(e);
        }
    }
    Ok(info)
}
