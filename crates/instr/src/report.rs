//! The report: every chosen function, instrumented (with its id and stub)
//! or refused (with the reason). JSON schema `mantle-instr-report/1`.

use serde::Serialize;

/// Why a site was not patched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Refusal {
    /// The symbol has no size, so its end is unknown.
    NoSize,
    /// The symbol claims bytes beyond its section.
    OutsideSection,
    /// Fewer bytes than the patch (`need`, after any `endbr64`).
    TooShort { size: u64, need: u64 },
    /// A branch, relocation or symbol targets this function offset,
    /// inside the patched bytes.
    BranchTarget { offset: u64 },
    /// An overwritten instruction cannot run in the stub.
    Unrelocatable { insn: String, why: &'static str },
    /// Bytes at this offset do not decode.
    Undecodable { offset: u64 },
    /// The instruction at this offset reads the return address, which the
    /// return frame replaces.
    ReadsReturnAddress { offset: u64 },
    /// The function needs a return frame and the object uses C++
    /// exceptions: the unwinder cannot step through a return frame.
    CxxExceptions,
    /// A fragment of another function (`.cold`), entered by a jump.
    NotAnEntry,
    /// The program's entry point (`_start`): entered by the kernel with
    /// no return address, never called.
    ProgramEntry,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoSize => write!(f, "symbol has no size"),
            Refusal::NotAnEntry => write!(f, "a split-off part of a function, entered by a jump"),
            Refusal::ProgramEntry => write!(f, "the program's entry point, entered by the kernel"),
            Refusal::OutsideSection => write!(f, "symbol extends beyond its section"),
            Refusal::TooShort { size, need } => {
                write!(f, "function has {size} bytes, the patch needs {need}")
            }
            Refusal::BranchTarget { offset } => {
                write!(f, "branch target inside the patched bytes (+{offset:#x})")
            }
            Refusal::Unrelocatable { insn, why } => write!(f, "cannot relocate `{insn}`: {why}"),
            Refusal::Undecodable { offset } => write!(f, "undecodable bytes at +{offset:#x}"),
            Refusal::ReadsReturnAddress { offset } => {
                write!(f, "reads its return address (+{offset:#x})")
            }
            Refusal::CxxExceptions => {
                write!(
                    f,
                    "needs a return frame, and C++ exceptions cannot unwind through one"
                )
            }
        }
    }
}

/// What happened to one chosen function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    Instrumented {
        id: u32,
        stub: usize,
        patched_bytes: usize,
        endbr64: bool,
        /// "balanced" (its `ret`s patched) or "return-frame".
        exit: &'static str,
        patched_rets: usize,
        /// Trampolines: how many vector registers (xmm0 up to, not
        /// including, the count) an ordinary hook call keeps at the
        /// function's entry and at its exit (`vregs`); null otherwise.
        xmm_kept: Option<[u8; 2]>,
    },
    Refused {
        reason: Refusal,
    },
}

/// One chosen function.
#[derive(Debug, Clone, Serialize)]
pub struct Function {
    pub name: String,
    pub section: String,
    pub offset: u64,
    pub size: u64,
    /// The signature of the COMDAT group the function's section is in
    /// (an inline function or template instance of C++): the linker keeps
    /// one copy of the group, the first object on its command line, so the
    /// function is instrumented, with this id, only if that copy is this
    /// object's (docs/instr.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comdat: Option<String>,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// The rewrite of one file.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub input: String,
    pub output: Option<String>,
    pub exit: &'static str,
    pub instrumented: usize,
    pub refused: usize,
    pub stubs: usize,
    pub exit_stubs: usize,
    /// A CET property (IBT/SHSTK) was cleared from the output.
    pub cet_cleared: bool,
    /// Call-through trampolines (one per function that has one).
    pub trampolines: usize,
    pub functions: Vec<Function>,
}

impl Report {
    pub(crate) fn new(input: &str, plan: &crate::Plan) -> Self {
        let instrumented = plan.sites.len();
        Report {
            schema: "mantle-instr-report/1",
            input: input.to_string(),
            output: None,
            exit: plan.mode.name(),
            instrumented,
            refused: plan.functions.len() - instrumented,
            stubs: plan.stubs.len(),
            exit_stubs: plan.exit_stubs.len(),
            cet_cleared: plan.cet && plan.return_frames,
            trampolines: plan.trampolines.len(),
            functions: plan.functions.clone(),
        }
    }

    /// The sidecar map lines (`id<TAB>name<TAB>object`) of the
    /// instrumented functions.
    pub fn map_lines(&self) -> String {
        let mut s = String::new();
        for f in &self.functions {
            if let Outcome::Instrumented { id, .. } = f.outcome {
                s.push_str(&format!("{id}\t{}\t{}\n", f.name, self.input));
            }
        }
        s
    }
}
