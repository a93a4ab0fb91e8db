//! The summary of a recording: what `mantle prof record` prints when it
//! ends (text on stderr, or JSON), with the caveats of [`Meta::caveats`].

use crate::model::Meta;

/// The outcome of a recording.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub session: String,
    pub meta: Meta,
    pub caveats: Vec<String>,
    pub rows: usize,
    pub images: usize,
    pub processes: usize,
    /// Exit code of the profiled command, if one was run.
    pub command_status: Option<i32>,
    /// `--continuous`: the sessions written and deleted (`meta` is then
    /// the last period's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continuous: Option<super::continuous::ContinuousSummary>,
}

impl Summary {
    pub fn render(&self) -> String {
        let m = &self.meta;
        let mut s = format!(
            "mantle prof: {} samples of {}{} in {:.2} s ({:.0}/s) on {} CPU(s), {} lost, throttled {} time(s)\n",
            m.samples,
            m.event,
            m.fallback_from
                .as_ref()
                .map(|f| format!(" (fallback for {f})"))
                .unwrap_or_default(),
            m.duration_ns as f64 / 1e9,
            m.samples as f64 / (m.duration_ns as f64 / 1e9).max(1e-9),
            m.cpus,
            m.lost_samples,
            m.throttle_events
        );
        s += &format!(
            "  session {} ({} profile rows, {} images, {} processes)\n",
            self.session, self.rows, self.images, self.processes
        );
        if let Some(c) = &self.continuous {
            s += &format!(
                "  continuous: {} session(s) written in {} ({} samples), {} deleted (beyond --keep/--max-size), {} kept; the last one's figures above\n",
                c.written.len(),
                c.dir,
                c.samples,
                c.deleted.len(),
                c.written.len() - c.deleted.len()
            );
        }
        for c in &self.caveats {
            s += &format!("  warning: {c}\n");
        }
        if let Some(c) = &m.cost {
            s += &format!(
                "  sample path: eBPF {:.0} ns mean (sd {:.0}, p99 {:.0}, min {:.0}, max {:.0}, n {}); kernel stats {:.0} ns/run over {} runs; user-space drain {:.0} ns/sample\n",
                c.bpf_self_ns.mean,
                c.bpf_self_ns.stddev,
                c.bpf_p99_ns,
                c.bpf_self_ns.min,
                c.bpf_self_ns.max,
                c.bpf_self_ns.n,
                c.bpf_stats_mean_ns,
                c.bpf_stats_runs,
                c.drain_ns_per_sample.mean
            );
        }
        if let Some(code) = self.command_status {
            if code != 0 {
                s += &format!("  the command exited with status {code}\n");
            }
        }
        s
    }
}
