//! `mantle demo`: written after the kernel side is proven (see below).
use mantle_tags::Error;

pub fn run(_json: bool) -> Result<(), Error> {
    Err(Error::Missing("demo not built yet".into()))
}
