//! The result of the probes: one [`Feature`] per probed thing, collected
//! in a [`Report`] that renders as the `mantle doctor` table or as JSON.

use std::fmt::Write as _;

use serde::Serialize;

/// One thing the kernel may or may not offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Feature {
    /// Stable identifier, e.g. `"prog_tp_btf"`.
    pub id: &'static str,
    /// Human-readable name, e.g. `"BPF program type tp_btf"`.
    pub name: String,
    /// Whether the probe succeeded.
    pub available: bool,
    /// What was tried and what happened, in plain words.
    pub detail: String,
    /// The mantle part(s) that use it: "tags", "profiler", "executive", "all".
    pub needed_by: &'static str,
}

/// The result of [`probe_all`](super::probe_all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Kernel release as reported by uname(2), e.g. `"6.18.44"`.
    pub kernel: String,
    /// All probed features, in a fixed order.
    pub features: Vec<Feature>,
}

impl Report {
    /// The feature with this id, if it was probed.
    pub fn get(&self, id: &str) -> Option<&Feature> {
        self.features.iter().find(|f| f.id == id)
    }

    /// Whether the feature with this id was probed and is available.
    pub fn has(&self, id: &str) -> bool {
        self.get(id).is_some_and(|f| f.available)
    }

    /// An aligned table, one feature per line: `yes`/`no`, name, detail.
    pub fn render_text(&self) -> String {
        let width = self
            .features
            .iter()
            .map(|f| f.name.chars().count())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        let _ = writeln!(out, "kernel {}", self.kernel);
        for f in &self.features {
            let mark = if f.available { "yes" } else { "no" };
            let pad = width - f.name.chars().count();
            let _ = writeln!(
                out,
                "{mark:<3}  {}{}  {}",
                f.name,
                " ".repeat(pad),
                f.detail
            );
        }
        out
    }
}
