//! mantle's one way of building eBPF C, for the `build.rs` of every crate
//! that has a kernel side (a build-dependency, never linked into mantle).
//!
//! ```text
//! // build.rs
//! mantle_bpf_build::Bpf::new("src/bpf/tags.bpf.c").include("src/bpf").build();
//! // -> $OUT_DIR/tags.bpf.o and $OUT_DIR/tags.skel.rs
//! ```
//!
//! Why one helper: each crate used to carry its own copy of the clang
//! arguments and of the vmlinux.h generation (one wrote it into `src/` once
//! and never refreshed it), with the x86 target hard-coded, and a machine
//! without `/sys/kernel/btf/vmlinux` could not build at all.
//!
//! What it decides, once for every crate:
//! * **Architecture** from `CARGO_CFG_TARGET_ARCH` (the target, not the
//!   build host), mapped to the kernel's name for `__TARGET_ARCH_*`, which
//!   libbpf's `bpf_tracing.h` needs for `PT_REGS_*` and `BPF_KPROBE`.
//! * **vmlinux.h**: the one checked in for that architecture under
//!   `crates/bpf-build/vmlinux/<CARGO_CFG_TARGET_ARCH>/vmlinux.h`, generated
//!   once by `scripts/gen-vmlinux.sh` (the way bcc's libbpf-tools ships one
//!   per architecture, so that the build does not depend on the build
//!   machine's kernel). CO-RE relocations adapt the object to the kernel it
//!   is loaded on, so the header only has to be a kernel new enough to name
//!   every type and field the C uses. `MANTLE_VMLINUX=running` opts into a
//!   header dumped with bpftool from the running kernel's
//!   `/sys/kernel/btf/vmlinux`, and `MANTLE_VMLINUX=/path/to/btf` from any
//!   BTF file (raw BTF, or a vmlinux ELF with a .BTF section); either is
//!   written into `OUT_DIR` only. Nothing generated is ever written into
//!   `src/`.
//! * **Tag vector width**: `MANTLE_MT_TAGS=128` builds with `-DMT_TAGS=128`
//!   (every crate must agree with the tags header, so it is honoured here).
//! * **Rebuilds**: clang writes the list of every file it read (`-MD`), and
//!   each one that exists afterwards becomes a `cargo:rerun-if-changed`
//!   line, so an edited header, an added piece of a split source or a new
//!   vmlinux.h rebuilds the object and nothing else does.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable choosing the vmlinux.h: unset or `checked-in` (the
/// header of this repository), `running` (the running kernel's BTF) or an
/// absolute path of a BTF file.
pub const VMLINUX_ENV: &str = "MANTLE_VMLINUX";

/// Environment variable overriding the tag vector width (tags.h `MT_TAGS`).
pub const MT_TAGS_ENV: &str = "MANTLE_MT_TAGS";

/// Directory of the checked-in headers, one subdirectory per
/// `CARGO_CFG_TARGET_ARCH` value. Compiled in: this crate is a path
/// dependency of the workspace, so its source directory is where it is.
const VMLINUX_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/vmlinux");

/// The kernel's name of a Rust target architecture, as libbpf's
/// `bpf_tracing.h` spells `__TARGET_ARCH_<name>`; None for architectures
/// that have no eBPF tracing support there.
pub fn kernel_arch(rust_arch: &str) -> Option<&'static str> {
    Some(match rust_arch {
        "x86_64" | "x86" => "x86",
        "aarch64" => "arm64",
        "arm" => "arm",
        "riscv64" => "riscv",
        "s390x" => "s390",
        "powerpc64" | "powerpc" => "powerpc",
        "mips" | "mips64" => "mips",
        "loongarch64" => "loongarch",
        "sparc64" => "sparc",
        _ => return None,
    })
}

/// The target architecture of this build (`CARGO_CFG_TARGET_ARCH`), which
/// cargo sets for build scripts; the host's when run elsewhere.
pub fn target_arch() -> String {
    std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| std::env::consts::ARCH.to_string())
}

/// Architectures with a checked-in vmlinux.h, sorted.
pub fn supported_archs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(VMLINUX_ROOT)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().join("vmlinux.h").is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `MANTLE_MT_TAGS` if set (and tells cargo to rerun when it changes).
pub fn mt_tags_override() -> Option<String> {
    println!("cargo:rerun-if-env-changed={MT_TAGS_ENV}");
    std::env::var(MT_TAGS_ENV).ok()
}

/// The directory holding the vmlinux.h to compile against (see the crate
/// doc for the choice). Panics with what to do when there is none.
pub fn vmlinux_dir() -> PathBuf {
    println!("cargo:rerun-if-env-changed={VMLINUX_ENV}");
    let arch = target_arch();
    let choice = std::env::var(VMLINUX_ENV).unwrap_or_default();
    match choice.as_str() {
        "" | "checked-in" => {
            let dir = Path::new(VMLINUX_ROOT).join(&arch);
            if !dir.join("vmlinux.h").is_file() {
                panic!(
                    "mantle-bpf-build: no checked-in vmlinux.h for target architecture `{arch}` \
                     (there are headers for: {}; README.md, Supported architectures, says \
                     which of them mantle builds for). Either build with {VMLINUX_ENV}=running to generate one \
                     into OUT_DIR from the running kernel's /sys/kernel/btf/vmlinux, or add \
                     crates/bpf-build/vmlinux/{arch}/vmlinux.h with scripts/gen-vmlinux.sh \
                     (see crates/bpf-build/vmlinux/README.md)",
                    supported_archs().join(", ")
                );
            }
            dir
        }
        "running" => dump_btf(Path::new("/sys/kernel/btf/vmlinux")),
        p if p.starts_with('/') => dump_btf(Path::new(p)),
        other => panic!(
            "mantle-bpf-build: {VMLINUX_ENV}={other:?}: expected `checked-in` (the default), \
             `running` or an absolute path of a BTF file"
        ),
    }
}

/// vmlinux.h dumped by bpftool from the BTF at `btf`, into OUT_DIR/vmlinux.
/// Regenerated each time the build script runs, never kept in `src/`.
fn dump_btf(btf: &Path) -> PathBuf {
    // The BTF file, not the header made from it (which this run rewrites):
    // /sys/kernel/btf/vmlinux gets a new time when another kernel boots.
    println!("cargo:rerun-if-changed={}", btf.display());
    let dir = out_dir().join("vmlinux");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/vmlinux");
    let out = Command::new("bpftool")
        .args(["btf", "dump", "file"])
        .arg(btf)
        .args(["format", "c"])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "mantle-bpf-build: {VMLINUX_ENV} asks for a vmlinux.h from {}, which needs \
                 bpftool (apt-get install bpftool): {e}",
                btf.display()
            )
        });
    assert!(
        out.status.success(),
        "mantle-bpf-build: bpftool btf dump file {} failed: {}",
        btf.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.join("vmlinux.h"), out.stdout).expect("write OUT_DIR/vmlinux/vmlinux.h");
    dir
}

fn out_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR: run from a build script"))
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("CARGO_MANIFEST_DIR: run from a build script"),
    )
}

/// One eBPF object and its skeleton. Paths are relative to the crate's
/// directory (`CARGO_MANIFEST_DIR`) unless absolute.
#[derive(Debug, Clone)]
pub struct Bpf {
    source: PathBuf,
    includes: Vec<PathBuf>,
    defines: Vec<String>,
}

impl Bpf {
    /// `source` is `<name>.bpf.c`; the build writes `OUT_DIR/<name>.bpf.o`
    /// and `OUT_DIR/<name>.skel.rs`.
    pub fn new(source: impl AsRef<Path>) -> Bpf {
        Bpf {
            source: manifest_dir().join(source),
            includes: Vec::new(),
            defines: Vec::new(),
        }
    }

    /// Adds an include directory (searched after the vmlinux.h directory,
    /// in the order given).
    pub fn include(mut self, dir: impl AsRef<Path>) -> Bpf {
        self.includes.push(manifest_dir().join(dir));
        self
    }

    /// Adds `-D<define>` (`"NAME"` or `"NAME=value"`).
    pub fn define(mut self, define: impl Into<String>) -> Bpf {
        self.defines.push(define.into());
        self
    }

    /// The object's name: the source's file name without `.bpf.c`.
    pub fn name(&self) -> String {
        let file = self
            .source
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        file.strip_suffix(".bpf.c")
            .unwrap_or_else(|| {
                panic!("mantle-bpf-build: {file}: the source must be named <name>.bpf.c")
            })
            .to_string()
    }

    /// The clang arguments of this build (before libbpf-cargo's own
    /// `-g -O2 -target bpf -c`); choosing the vmlinux.h may dump one.
    fn clang_args(&self) -> Vec<String> {
        let arch = target_arch();
        let karch = kernel_arch(&arch).unwrap_or_else(|| {
            panic!(
                "mantle-bpf-build: target architecture `{arch}` has no eBPF tracing support in \
                 libbpf (there are vmlinux.h headers for: {})",
                supported_archs().join(", ")
            )
        });
        // -mcpu=v3 (Linux 5.1+): 32-bit jumps and ALU32, fewer and
        // simpler instructions for the verifier.
        let mut args = vec![
            "-mcpu=v3".to_string(),
            "-g".to_string(),
            "-O2".to_string(),
            format!("-D__TARGET_ARCH_{karch}"),
            format!("-I{}", vmlinux_dir().display()),
        ];
        args.extend(self.includes.iter().map(|d| format!("-I{}", d.display())));
        if let Some(tags) = mt_tags_override() {
            args.push(format!("-DMT_TAGS={tags}"));
        }
        args.extend(self.defines.iter().map(|d| format!("-D{d}")));
        args
    }

    /// Compiles the object and generates the skeleton; panics (the build
    /// script's way of failing) with clang's messages.
    pub fn build(&self) {
        let name = self.name();
        self.refuse_stale_vmlinux();
        let out = out_dir();
        let deps = out.join(format!("{name}.bpf.d"));
        let mut args = self.clang_args();
        args.extend([
            "-MD".to_string(),
            "-MF".to_string(),
            deps.display().to_string(),
        ]);
        println!("cargo:rerun-if-changed={}", self.source.display());
        libbpf_cargo::SkeletonBuilder::new()
            .source(&self.source)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args(args)
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("mantle-bpf-build: failed to build {name}.bpf.c: {e:#}"));
        let listed = std::fs::read_to_string(&deps)
            .unwrap_or_else(|e| panic!("mantle-bpf-build: read {}: {e}", deps.display()));
        for file in depfile_inputs(&listed) {
            // libbpf-cargo's own headers are extracted to a temporary
            // directory that is gone by now, and a header generated into
            // OUT_DIR is rewritten by every run: naming either would rerun
            // the build every time.
            if Path::new(&file).exists() && !Path::new(&file).starts_with(&out) {
                println!("cargo:rerun-if-changed={file}");
            }
        }
    }

    /// Earlier build scripts wrote a vmlinux.h into `src/bpf/`. The C
    /// includes it as `"vmlinux.h"`, which the compiler looks for next to
    /// the including file before any `-I` directory, so a leftover copy
    /// would silently win over the chosen header: refuse to build instead.
    fn refuse_stale_vmlinux(&self) {
        let dirs = self
            .source
            .parent()
            .into_iter()
            .chain(self.includes.iter().map(|d| d.as_path()));
        for dir in dirs {
            let stale = dir.join("vmlinux.h");
            if stale.exists() {
                panic!(
                    "mantle-bpf-build: {} is a leftover of an older build (vmlinux.h now comes \
                     from crates/bpf-build/vmlinux/ or OUT_DIR) and would shadow it: delete it",
                    stale.display()
                );
            }
        }
    }
}

/// The prerequisites of a make-style dependency file (`target: a b \`),
/// with `\ ` unescaped.
fn depfile_inputs(text: &str) -> Vec<String> {
    let joined = text.replace("\\\n", " ").replace("\\\r\n", " ");
    let Some((_, rest)) = joined.split_once(": ") else {
        return Vec::new();
    };
    let mut files = Vec::new();
    let mut cur = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                cur.push(' ');
                chars.next();
            }
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    files.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        files.push(cur);
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depfile_prerequisites() {
        let d = "/o/tags.bpf.o: /s/tags.bpf.c /v/vmlinux.h \\\n  /s/a\\ b.h /s/tags.h\n";
        assert_eq!(
            depfile_inputs(d),
            ["/s/tags.bpf.c", "/v/vmlinux.h", "/s/a b.h", "/s/tags.h"]
        );
    }

    #[test]
    fn arch_names() {
        assert_eq!(kernel_arch("x86_64"), Some("x86"));
        assert_eq!(kernel_arch("aarch64"), Some("arm64"));
        assert_eq!(kernel_arch("wasm32"), None);
    }

    #[test]
    fn x86_64_is_checked_in() {
        assert!(supported_archs().iter().any(|a| a == "x86_64"));
    }
}
