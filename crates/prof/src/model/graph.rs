//! The report's call stacks, interned: [`StackGraph`].
//!
//! Mechanism: every frame is one (image, address) pair, stored once
//! ([`StackGraph::frames`], a leaf at its offset, a caller at its return
//! address − 1, the call instruction) and named by a function id
//! ([`StackGraph::funcs`], one per (image name, symbol)); a stack is a
//! slice of frame ids in one arena (4 bytes per frame, nothing per row);
//! a row is (pid, mode, leaf frame, stack id, tag set id, count), 32 bytes.
//! So a report's memory grows with the distinct frames and stacks, never
//! with rows × depth (issue 33: 16 KB per row before, at 60 frames).
//! Folded stacks are built on a trie of function ids (a node per distinct
//! root-first path prefix) and turned into text one line at a time.
//!
//! Invariant: every frame id of a row or a stack names a frame, and every
//! frame a row reaches has a function (the report symbolizes exactly the
//! frames its rows reach).

use super::image::{Image, Mode};
use super::report::FlameRoot;
use std::collections::HashMap;
use std::io::Write;

/// A function: an image's display name and a symbol (or `image+0xoffset`
/// where no symbol covers the address).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Func {
    pub image: String,
    pub symbol: String,
    /// A kernel function (flame graphs mark them `_[k]`, as perf does).
    pub kernel: bool,
}

/// One aggregated row: samples of one (pid, mode, leaf, stack, tag set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GraphRow {
    pub pid: u32,
    pub mode: Mode,
    /// Frame id of the sampled address.
    pub leaf: u32,
    /// Stack id (0: no callers known).
    pub stack: u32,
    /// Index in [`StackGraph::tagsets`].
    pub tags: u32,
    /// Index in [`StackGraph::cgroups`].
    pub cgroup: u32,
    pub count: u64,
}

// the report's memory per row (issue 33's bars): 32 bytes, cgroup included
const _: () = assert!(std::mem::size_of::<GraphRow>() == 32);

/// Every row of a report with its interned stack.
#[derive(Debug, Clone, Default)]
pub struct StackGraph {
    pub images: Vec<Image>,
    /// (image, address looked up).
    pub frames: Vec<(u32, u64)>,
    /// The function of each frame (`u32::MAX` for frames no row reaches).
    pub frame_func: Vec<u32>,
    pub funcs: Vec<Func>,
    /// Stack `i` is `stack_frames[stack_start[i]..stack_start[i + 1]]`,
    /// callers nearest first; stack 0 is empty.
    pub stack_frames: Vec<u32>,
    pub stack_start: Vec<usize>,
    pub rows: Vec<GraphRow>,
    /// The tag names of each tag set (empty: untagged).
    pub tagsets: Vec<Vec<String>>,
    /// Each cgroup rows name: (cgroup v2 id, path; `cgroup:ID` when the
    /// session has no path for it, `(unknown)` for id 0).
    pub cgroups: Vec<(u64, String)>,
    /// Command name of each pid with rows.
    pub comms: HashMap<u32, String>,
    /// Component of each (pid, mode) with rows.
    pub components: HashMap<(u32, Mode), String>,
    pub flame_root: FlameRoot,
    /// Source files named by [`Self::frame_src`] and [`Self::func_src`].
    pub files: Vec<String>,
    /// Source of each frame: (file index, line); `NO_FILE` and 0 where
    /// unknown. Empty when nothing was symbolized.
    pub frame_src: Vec<(u32, u32)>,
    /// Calls inlined at a frame, outermost first: (function, file index,
    /// line of the frame's address in that function).
    pub frame_inlined: HashMap<u32, Vec<(String, u32, u32)>>,
    /// Per function: (file index, first line), parallel to `funcs`.
    pub func_src: Vec<(u32, u32)>,
    /// Per function: the other names users may type for it (aliases at
    /// its address, the IFUNC it implements), parallel to `funcs`.
    pub func_aliases: Vec<Vec<String>>,
    /// Per function: its code as file offsets \[start, end), when known.
    pub func_range: Vec<Option<(u64, u64)>>,
    /// Per image: one executable mapping of it while recording (start,
    /// end, file offset), for pprof's mappings; None when none was seen.
    pub image_maps: Vec<Option<(u64, u64, u64)>>,
}

/// No source file ([`StackGraph::frame_src`]).
pub const NO_FILE: u32 = u32::MAX;

impl StackGraph {
    /// The callers of stack `id` (frame ids, nearest first).
    pub fn callers(&self, id: u32) -> &[u32] {
        let i = id as usize;
        match (self.stack_start.get(i), self.stack_start.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.stack_frames[a..b],
            _ => &[],
        }
    }

    /// The function of frame `f`.
    pub fn func_of(&self, f: u32) -> u32 {
        self.frame_func[f as usize]
    }

    /// A row's functions, leaf first.
    pub fn row_funcs(&self, r: &GraphRow) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(r.leaf)
            .chain(self.callers(r.stack).iter().copied())
            .map(|f| self.func_of(f))
    }

    /// The source file of index `f` ([`NO_FILE`]: none).
    pub fn file(&self, f: u32) -> Option<&str> {
        self.files.get(f as usize).map(String::as_str)
    }

    /// The path of cgroup index `c` ([`Self::cgroups`]).
    pub fn cgroup_name(&self, c: u32) -> &str {
        self.cgroups
            .get(c as usize)
            .map_or("(unknown)", |x| x.1.as_str())
    }

    /// The command name of `pid`.
    pub fn comm(&self, pid: u32) -> &str {
        self.comms.get(&pid).map(String::as_str).unwrap_or("?")
    }

    fn roots(&self, r: &GraphRow) -> Vec<String> {
        let tags = &self.tagsets[r.tags as usize];
        match self.flame_root {
            FlameRoot::Process => vec![format!("{}[{}]", self.comm(r.pid), r.pid)],
            FlameRoot::Component => vec![self
                .components
                .get(&(r.pid, r.mode))
                .cloned()
                .unwrap_or_default()],
            FlameRoot::Tag if tags.is_empty() => vec!["(untagged)".into()],
            FlameRoot::Tag => tags.iter().map(|t| format!("tag {t}")).collect(),
            FlameRoot::Cgroup => vec![self.cgroup_name(r.cgroup).to_string()],
            FlameRoot::None => vec![],
        }
    }

    /// Folded stacks, one call per line ("root;caller;...;leaf", its
    /// count), in a stable order; built on a trie of function ids, so
    /// equal paths are summed without making their text first.
    pub fn for_each_folded(
        &self,
        f: &mut dyn FnMut(&str, u64) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        // node 0: the empty path; node i: (parent, function)
        let mut nodes: Vec<(u32, u32)> = vec![(0, u32::MAX)];
        let mut child: FxMap<(u32, u32), u32> = FxMap::default();
        let mut at = |nodes: &mut Vec<(u32, u32)>, parent: u32, func: u32| -> u32 {
            *child.entry((parent, func)).or_insert_with(|| {
                nodes.push((parent, func));
                (nodes.len() - 1) as u32
            })
        };
        let mut memo: Vec<u32> = vec![u32::MAX; self.stack_start.len().max(1)];
        let mut root_ids: HashMap<String, u32> = HashMap::new();
        let mut root_names: Vec<String> = Vec::new();
        let mut acc: FxMap<(u32, u32), u64> = FxMap::default();
        for r in &self.rows {
            let s = r.stack as usize;
            let base = match memo.get(s) {
                Some(&n) if n != u32::MAX => n,
                _ => {
                    let mut n = 0;
                    for &fr in self.callers(r.stack).iter().rev() {
                        n = at(&mut nodes, n, self.func_of(fr));
                    }
                    if let Some(m) = memo.get_mut(s) {
                        *m = n;
                    }
                    n
                }
            };
            let node = at(&mut nodes, base, self.func_of(r.leaf));
            let roots = self.roots(r);
            if roots.is_empty() {
                *acc.entry((u32::MAX, node)).or_insert(0) += r.count;
            }
            for root in roots {
                let id = *root_ids.entry(root.clone()).or_insert_with(|| {
                    root_names.push(root);
                    (root_names.len() - 1) as u32
                });
                *acc.entry((id, node)).or_insert(0) += r.count;
            }
        }
        drop(child);
        drop(memo);
        let mut keys: Vec<((u32, u32), u64)> = acc.into_iter().collect();
        keys.sort_unstable();
        let mut line = String::new();
        let mut path: Vec<u32> = Vec::new();
        for ((root, node), n) in keys {
            line.clear();
            path.clear();
            let mut x = node;
            while x != 0 {
                let (p, func) = nodes[x as usize];
                path.push(func);
                x = p;
            }
            if root != u32::MAX {
                line.push_str(&sanitize_folded(&root_names[root as usize]));
            }
            for &func in path.iter().rev() {
                if !line.is_empty() {
                    line.push(';');
                }
                let fu = &self.funcs[func as usize];
                line.push_str(&sanitize_folded(&fu.symbol));
                if fu.kernel {
                    // perf's and inferno's mark of a kernel frame
                    line.push_str("_[k]");
                }
            }
            f(&line, n)?;
        }
        Ok(())
    }

    /// Folded stacks as (line, count) pairs, sorted by line.
    pub fn folded(&self) -> Vec<(String, u64)> {
        let mut v = Vec::new();
        let _ = self.for_each_folded(&mut |l, n| {
            v.push((l.to_string(), n));
            Ok(())
        });
        v.sort();
        v
    }

    /// Writes the folded stacks, "stack count" per line.
    pub fn write_folded(&self, w: &mut dyn Write) -> std::io::Result<()> {
        self.for_each_folded(&mut |l, n| writeln!(w, "{l} {n}"))
    }
}

/// A fast hash for the report's integer keys (FxHash, rustc's): the keys
/// come from a session, but a session's author gains nothing by making a
/// report slow to their own eyes, and SipHash was a tenth of a report's
/// time on 1M rows.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A HashMap with [`FxHasher`].
pub type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;

/// Folded-stack frames may not contain ';' (frame separator) or newlines.
pub fn sanitize_folded(s: &str) -> String {
    s.replace([';', '\n'], ":")
}
