//! The recording's metadata (a session's `meta.json`): what was sampled,
//! how, what was lost or throttled, and the sample path's measured cost.
//!
//! [`Meta::caveats`] turns it into the warnings every summary and report
//! must show: the rate is never changed silently.

use serde::{Deserialize, Serialize};

/// What a session's metadata says about the recording (the report header).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meta {
    pub format: u32,
    pub mantle_version: String,
    /// The event actually sampled.
    pub event: String,
    /// The event that was asked for, when a fallback replaced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_from: Option<String>,
    /// Requested frequency (Hz) or period (events), one of the two.
    pub freq: Option<u64>,
    pub period: Option<u64>,
    pub target: String,
    pub cpus: u32,
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    pub samples: u64,
    /// Samples the sample path could not record (map or ring full).
    pub lost_samples: u64,
    /// Side-band records lost (PERF_RECORD_LOST).
    pub lost_sideband: u64,
    pub throttle_events: u64,
    pub unthrottle_events: u64,
    pub max_sample_rate_start: Option<i64>,
    pub max_sample_rate_end: Option<i64>,
    /// "aggregate" or "ring".
    pub transport: String,
    pub tags_loaded: bool,
    pub kernel_symbols: bool,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Call stacks: "none", "perf" (PERF_SAMPLE_CALLCHAIN) or "bpf"
    /// (bpf_get_stack walks); format 1 sessions have none.
    #[serde(default = "no_stacks")]
    pub stacks: String,
    /// Stacks not stored (stack table full, or busy), each one sample
    /// counted without that stack.
    #[serde(default)]
    pub lost_stacks: u64,
    /// The sample path's own cost, when measured (`record --self-timing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<SampleCost>,
    /// `--stacks dwarf`: the user-space unwinding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unwind: Option<UnwindInfo>,
    /// How samples left the kernel: "bpf" (the eBPF sample path) or
    /// "perf-ring" (sample records read from the perf ring: `--stacks
    /// dwarf`, or a recorder without CAP_BPF). Absent in older sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_path: Option<String>,
    /// User-mode samples only (`exclude_kernel`): recorded without
    /// CAP_PERFMON at `perf_event_paranoid` 2, as perf's `:u`.
    #[serde(default)]
    pub user_only: bool,
    /// The callchain depth asked of the perf core (`sample_max_stack`,
    /// from `kernel.perf_event_max_stack`). Absent in older sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stack: Option<u16>,
    /// Where each sample's cgroup came from: "bpf"
    /// (`bpf_get_current_cgroup_id`), "perf-sample" (PERF_SAMPLE_CGROUP),
    /// "proc" (`/proc/PID/cgroup` at the process's first sample) or "none"
    /// (no cgroup v2). Absent in sessions before per-sample cgroups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroups: Option<String>,
    /// `record --off-cpu`: what the off-CPU path recorded and lost
    /// (the rows are in offcpu.tsv). Absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_cpu: Option<super::offcpu::OffCpuInfo>,
}

/// What `--stacks dwarf` unwinding did (crate::unwind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UnwindInfo {
    /// Bytes of user stack asked for per sample.
    pub stack_copy: u32,
    /// Mean bytes the kernel copied per sample (less near a stack's top).
    pub stack_bytes_mean: f64,
    /// User stacks unwound.
    pub stacks: u64,
    /// Of which ended before the stack's recognized end (deeper than the
    /// copy, or code without call frame information).
    pub truncated: u64,
    /// Samples of kernel threads (no user stack).
    pub no_user: u64,
    /// Sample records that did not parse.
    pub malformed: u64,
    /// User-space cost per sample (parse, unwind, resolve, merge), ns.
    pub cost_ns: Dist,
    pub cost_p50_ns: f64,
    pub cost_p99_ns: f64,
}

fn no_stacks() -> String {
    "none".into()
}

/// Distribution of a per-sample cost in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub n: u64,
    pub mean: f64,
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
}

impl Dist {
    /// From a count, a sum, a sum of squares, min and max.
    pub fn from_moments(n: u64, sum: f64, sumsq: f64, min: f64, max: f64) -> Dist {
        if n == 0 {
            return Dist::default();
        }
        let mean = sum / n as f64;
        let var = (sumsq / n as f64 - mean * mean).max(0.0);
        Dist {
            n,
            mean,
            stddev: var.sqrt(),
            min,
            max,
        }
    }
    /// From individual values.
    pub fn of(v: &[f64]) -> Dist {
        let n = v.len() as u64;
        let sum: f64 = v.iter().sum();
        let sumsq: f64 = v.iter().map(|x| x * x).sum();
        let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        Dist::from_moments(n, sum, sumsq, min, max)
    }
}

/// The sample path's own cost (the paper's Table 2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleCost {
    /// The eBPF program timing itself (bpf_ktime_get_ns at entry and exit).
    pub bpf_self_ns: Dist,
    /// Kernel accounting: run_time_ns / run_cnt (BPF_ENABLE_STATS), mean only.
    pub bpf_stats_mean_ns: f64,
    pub bpf_stats_runs: u64,
    /// User space: draining + resolving, per sample, one value per drain.
    pub drain_ns_per_sample: Dist,
    /// Percentiles of the self-timed program (from its histogram of
    /// `MP_HIST_NS` ns steps: the upper edge of the percentile's step).
    #[serde(default)]
    pub bpf_p50_ns: f64,
    #[serde(default)]
    pub bpf_p99_ns: f64,
}

/// The upper edge (ns) of the step holding the `q` quantile of a
/// histogram of `step` ns steps (0 when it is empty).
pub fn hist_quantile(hist: &[u64], step: f64, q: f64) -> f64 {
    let n: u64 = hist.iter().fold(0, |a, &b| a.saturating_add(b));
    if n == 0 {
        return 0.0;
    }
    let want = (q * n as f64).ceil().max(1.0) as u64;
    let mut acc = 0u64;
    for (i, &c) in hist.iter().enumerate() {
        acc = acc.saturating_add(c);
        if acc >= want {
            return (i + 1) as f64 * step;
        }
    }
    hist.len() as f64 * step
}

impl Meta {
    /// Lines that must be shown wherever the profile is (summary, report).
    pub fn caveats(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(f) = &self.fallback_from {
            v.push(format!(
                "event {f} is not available here: sampled {} instead (--fallback)",
                self.event
            ));
        }
        if self.throttle_events > 0 {
            v.push(format!(
                "the kernel throttled sampling {} time(s) (perf_event_max_sample_rate or interrupt time too long): fewer samples than asked",
                self.throttle_events
            ));
        }
        if let (Some(a), Some(b)) = (self.max_sample_rate_start, self.max_sample_rate_end) {
            if a != b {
                v.push(format!(
                    "kernel.perf_event_max_sample_rate changed during recording: {a} -> {b} (the kernel lowers it when sample interrupts take too long)"
                ));
            }
        }
        if self.lost_samples > 0 {
            v.push(format!(
                "{} sample(s) lost in the sample path (count map or ring buffer full)",
                self.lost_samples
            ));
        }
        if self.lost_stacks > 0 {
            v.push(format!(
                "{} stack(s) not stored (stack table full, or no memory at hand in the sample interrupt): those samples count for their own function only",
                self.lost_stacks
            ));
        }
        if self.lost_sideband > 0 {
            v.push(if self.stacks == "dwarf" {
                format!(
                    "{} record(s) lost from the perf rings (samples with their stack copies, or side band: some mappings may be missing)",
                    self.lost_sideband
                )
            } else {
                format!(
                    "{} side-band record(s) lost: some mappings may be missing",
                    self.lost_sideband
                )
            });
        }
        if let Some(u) = &self.unwind {
            if u.truncated > 0 {
                v.push(format!(
                    "{} of {} user stacks unwound only in part (deeper than the {} bytes copied, or code without call frame information)",
                    u.truncated, u.stacks, u.stack_copy
                ));
            }
        }
        // (a user-mode-only recording has no kernel frames to name)
        if !self.kernel_symbols && !self.user_only {
            v.push("kernel symbols unavailable (kallsyms addresses hidden)".into());
        }
        if let Some(o) = &self.off_cpu {
            v.extend(o.caveats());
        }
        v.extend(self.warnings.iter().cloned());
        v
    }
}
