//! Images and CPU modes: the names samples are attributed to.
//!
//! An [`Image`] is what a sample's ip resolves into: an ELF file (path
//! plus build ID: two files at one path with different build IDs are two
//! images), the kernel, the vDSO, anonymous or JIT memory, or "unknown".
//! The bracketed names are perf's and OProfile's, so reports read alike.

use serde::{Deserialize, Serialize};

/// The kernel image's name (as perf and OProfile call it).
pub const KERNEL_IMAGE: &str = "[kernel.kallsyms]";
pub const VDSO_IMAGE: &str = "[vdso]";
pub const ANON_IMAGE: &str = "[anon]";
pub const JIT_IMAGE: &str = "[jit]";
pub const UNKNOWN_IMAGE: &str = "[unknown]";
pub const UNKNOWN_SYMBOL: &str = "[unknown]";

/// CPU mode of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    User,
    Kernel,
}

/// What kind of thing an image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    /// An ELF file on disk (executable or shared library).
    Elf,
    /// The kernel (symbols from the session's kallsyms snapshot).
    Kernel,
    /// The vDSO (a copy is kept in the session).
    Vdso,
    /// Executable anonymous memory without a JIT map.
    Anon,
    /// Executable anonymous memory described by /tmp/perf-PID.map.
    Jit,
    /// An address no mapping covered.
    Unknown,
}

/// An image samples are attributed to. Two files at the same path with
/// different build IDs are two images.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Image {
    pub path: String,
    pub kind: ImageKind,
    /// Lower-case hex, when the file has one.
    pub build_id: Option<String>,
    /// For Jit images: whose perf map (the offsets are absolute addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl Image {
    pub fn named(path: &str, kind: ImageKind) -> Image {
        Image {
            path: path.to_string(),
            kind,
            build_id: None,
            pid: None,
        }
    }
    /// The short name shown in tables.
    pub fn display(&self) -> String {
        match self.kind {
            ImageKind::Jit => format!("{JIT_IMAGE}:{}", self.pid.unwrap_or(0)),
            _ => self.path.clone(),
        }
    }
}
