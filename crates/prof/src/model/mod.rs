//! The pure core of the profiler: no system calls, no files.
//!
//! One concern per file:
//! * [`image`]: images and CPU modes, the names samples are attributed to;
//! * [`space`]: address-space replay ([`AddressSpaces`]): the side band and
//!   the /proc snapshot replayed, a sample's ip resolved to an image and an
//!   offset in it;
//! * [`profile`]: the compact merged profile ([`Profile`]) and tag vectors;
//! * [`kallsyms`]: kernel addresses looked up in a kallsyms snapshot;
//! * [`meta`]: the recording's metadata and its caveats;
//! * [`offcpu`]: off-CPU time (`record --off-cpu`) and its report half;
//! * [`report`]: the report model ([`ReportBuilder`], [`build_report`]);
//! * [`graph`]: the report's interned stacks ([`StackGraph`]);
//! * [`text`]: the text renderer ([`render_text`]).
//!
//! Everything is re-exported here, so `mantle_prof::model::X` names each
//! item whichever file holds it.

pub mod graph;
pub mod image;
pub mod kallsyms;
pub mod meta;
pub mod offcpu;
pub mod profile;
pub mod report;
pub mod space;
pub mod text;

pub use graph::*;
pub use image::*;
pub use kallsyms::*;
pub use meta::*;
pub use offcpu::*;
pub use profile::*;
pub use report::*;
pub use space::*;
pub use text::*;

#[cfg(test)]
mod tests;
