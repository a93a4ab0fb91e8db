//! The end of a recording: JIT maps of the sampled processes, the
//! recording's metadata ([`Meta`]), and the session written to disk.
//!
//! Mechanism: /tmp/perf-PID.map is read (a regular file only) for every
//! sampled process; a process that has one gets its anonymous-memory rows
//! re-attributed to a JIT image of its own. The session is then written
//! by [`session::write_session`] (temporary directory + rename).
//!
//! Invariant: whatever was lost, throttled, dropped or replaced is in
//! `Meta` (counters and warnings), so every summary and report shows it.

use super::host::{kallsyms_text, max_sample_rate};
use super::run::Run;
use super::sideband::SideStats;
use super::{RecordOpts, Stacks, Summary, Transport};
use crate::abi::Stats;
use crate::events::EventDef;
use crate::kernel;
use crate::model::{
    hist_quantile, AddressSpaces, Dist, Image, ImageKind, Meta, Profile, RowKey, SampleCost,
    TagName, UnwindInfo, JIT_IMAGE,
};
use crate::session::{self, SessionData};
use crate::Error;
use std::path::PathBuf;

/// JIT maps of processes that had executable anonymous memory: read,
/// cleaned (malformed lines dropped, with a warning), and the anonymous
/// rows of those processes moved to their JIT image.
pub(super) fn jit_maps(
    profile: &mut Profile,
    sp: &mut AddressSpaces,
    warnings: &mut Vec<String>,
) -> Result<Vec<(u32, String)>, Error> {
    let mut jit_maps = Vec::new();
    let sampled_pids: std::collections::HashSet<u32> =
        profile.counts().keys().map(|k| k.pid).collect();
    for pid in sampled_pids {
        // a regular file only: /tmp is writable by anyone, and a FIFO there
        // would block a plain open forever
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        if let Ok(b) = crate::files::read_regular(&path, session::JSON_MAX) {
            // written by the JIT, so anything: the session keeps only the
            // lines the report's parser accepts, and says how many it dropped
            let (t, dropped) = crate::symbols::JitMap::clean(&String::from_utf8_lossy(&b));
            if dropped > 0 {
                warnings.push(format!(
                    "{}: {dropped} malformed line(s) dropped",
                    path.display()
                ));
            }
            if let Some(p) = sp.procs.get_mut(&pid) {
                p.jit_map = true;
            }
            jit_maps.push((pid, t));
        }
    }
    // JIT images need re-resolution now that jit_map is known: redo anon rows
    if !jit_maps.is_empty() {
        let rows = profile.take_rows();
        let anon = profile
            .images
            .iter()
            .position(|i| i.kind == ImageKind::Anon);
        // the same rows as before under other keys: the same total, which
        // fitted; an error here would be a bug, reported, not a panic
        let readd = |e| Error::Counts {
            what: "re-attributing JIT rows",
            source: e,
        };
        for (k, n) in rows {
            if Some(k.image as usize) == anon && sp.procs.get(&k.pid).is_some_and(|p| p.jit_map) {
                let img = Image {
                    path: JIT_IMAGE.into(),
                    kind: ImageKind::Jit,
                    build_id: None,
                    pid: Some(k.pid),
                };
                let id = profile.image_id(&img);
                profile
                    .add_row(RowKey { image: id, ..k }, n)
                    .map_err(readd)?;
            } else {
                profile.add_row(k, n).map_err(readd)?;
            }
        }
    }
    Ok(jit_maps)
}

/// The sample path's own cost (`--self-timing`).
fn sample_cost(
    st: &Stats,
    (run_ns, run_cnt): (u64, u64),
    drain_costs: &[f64],
    hist: &[u64],
) -> SampleCost {
    let step = crate::abi::MP_HIST_NS as f64;
    SampleCost {
        bpf_self_ns: Dist::from_moments(
            st.t_n,
            st.t_sum as f64,
            st.t_sumsq as f64,
            st.t_min as f64,
            st.t_max as f64,
        ),
        bpf_stats_mean_ns: if run_cnt > 0 {
            run_ns as f64 / run_cnt as f64
        } else {
            0.0
        },
        bpf_stats_runs: run_cnt,
        drain_ns_per_sample: Dist::of(drain_costs),
        bpf_p50_ns: hist_quantile(hist, step, 0.5),
        bpf_p99_ns: hist_quantile(hist, step, 0.99),
    }
}

/// What `--stacks dwarf` unwinding did and cost.
fn unwind_info(run: &Run, stack_copy: u32) -> UnwindInfo {
    let d = &run.dwarf;
    let mut sorted = d.costs.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |q: f64| {
        sorted
            .get(((q * sorted.len() as f64).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0.0)
    };
    UnwindInfo {
        stack_copy,
        stack_bytes_mean: if d.samples > 0 {
            d.stack_bytes as f64 / d.samples as f64
        } else {
            0.0
        },
        stacks: run.unwind.stacks,
        truncated: run.unwind.truncated,
        no_user: run.unwind.no_user,
        malformed: d.malformed,
        cost_ns: Dist::of(&d.costs),
        cost_p50_ns: q(0.5),
        cost_p99_ns: q(0.99),
    }
}

/// What [`meta`] and [`write`] need besides the run itself, the side
/// band's counters and the cgroups.
#[derive(Clone)]
pub(super) struct Recorded {
    pub ev: &'static EventDef,
    pub fallback_from: Option<String>,
    pub freq: Option<u64>,
    pub period: Option<u64>,
    pub target: String,
    pub cpus: u32,
    pub max_rate_start: Option<i64>,
    pub tags_loaded: bool,
    pub warnings: Vec<String>,
    pub throttle_visible: bool,
    /// How the recorder could sample (eBPF path, kernel mode).
    pub access: super::Access,
    /// The callchain depth asked for.
    pub max_stack: u16,
    /// Where the samples' cgroups come from.
    pub cgroup_source: super::cgroups::Source,
}

/// The metadata of a recording (or of one period of a continuous
/// one): what was sampled, how, and what was lost.
pub(super) fn meta(
    o: &RecordOpts,
    run: &Run,
    r: &Recorded,
    side: &SideStats,
    kernel_symbols: bool,
) -> Meta {
    let mut warnings = r.warnings.clone();
    if !r.throttle_visible {
        warnings.push(
            "throttle records could not be routed to the side band: throttling is detected only through the max-sample-rate sysctl".into(),
        );
    }
    let st = &run.stats;
    let cost = o
        .self_timing
        .then(|| sample_cost(st, run.prog_run, &run.drain_costs, &run.cost_hist));
    Meta {
        format: session::FORMAT,
        mantle_version: env!("CARGO_PKG_VERSION").into(),
        event: r.ev.name.into(),
        fallback_from: r.fallback_from.clone(),
        freq: r.freq,
        period: r.period,
        target: r.target.clone(),
        cpus: r.cpus,
        start_unix_ns: run.start_unix_ns,
        duration_ns: run.duration.as_nanos() as u64,
        samples: st.samples.saturating_add(run.dwarf.samples),
        lost_samples: st
            .dropped
            .saturating_add(st.ring_full)
            .saturating_add(side.lost_samples),
        // a corrupted stretch of ring is at least one record lost
        lost_sideband: side.lost.saturating_add(side.corrupt),
        throttle_events: side.throttle,
        unthrottle_events: side.unthrottle,
        max_sample_rate_start: r.max_rate_start,
        max_sample_rate_end: max_sample_rate(),
        transport: match o.transport {
            Transport::Aggregate => "aggregate".into(),
            Transport::Ring => "ring".into(),
        },
        tags_loaded: r.tags_loaded,
        stacks: match o.stacks {
            Stacks::None => "none",
            Stacks::Perf => "perf",
            Stacks::Bpf => "bpf",
            Stacks::Dwarf => "dwarf",
        }
        .into(),
        lost_stacks: st.stack_lost,
        kernel_symbols,
        warnings,
        cost,
        unwind: (o.stacks == Stacks::Dwarf).then(|| unwind_info(run, o.stack_copy)),
        sample_path: Some(
            if r.access.bpf && o.stacks != Stacks::Dwarf {
                "bpf"
            } else {
                "perf-ring"
            }
            .into(),
        ),
        user_only: !r.access.kernel,
        max_stack: (o.stacks != Stacks::None).then_some(r.max_stack),
        cgroups: Some(r.cgroup_source.name().into()),
        off_cpu: run.off_cpu.as_ref().map(|off| off.info()),
    }
}

/// What a session holds besides the profile and the metadata.
pub(super) struct Tables<'a> {
    pub side: &'a SideStats,
    pub tags: &'a [TagName],
    pub jit_maps: &'a [(u32, String)],
    pub cgroups: &'a super::cgroups::Cgroups,
}

/// Writes the session and says what was recorded.
pub(super) fn write(
    o: &RecordOpts,
    run: Run,
    sp: &AddressSpaces,
    r: Recorded,
    t: Tables,
) -> Result<Summary, Error> {
    let ks = kallsyms_text();
    let meta = meta(o, &run, &r, t.side, ks.is_some());
    let vdso = kernel::vdso_image();
    let profile = &run.profile;
    let cgroups = t.cgroups.table(profile.counts().keys().map(|k| k.cgroup));
    session::write_session(
        &o.output,
        &SessionData {
            meta: &meta,
            profile,
            procs: &sp.procs,
            history: &sp.history,
            tags: t.tags,
            kallsyms_text: ks.as_deref(),
            vdso: vdso.as_deref(),
            jit_maps: t.jit_maps,
            cgroups: &cgroups,
            off_cpu: run.off_cpu.as_ref().map(|off| &off.rows),
        },
        o.force,
    )?;
    Ok(Summary {
        session: o.output.display().to_string(),
        caveats: meta.caveats(),
        rows: profile.counts().len(),
        images: profile.images.len(),
        processes: sp.procs.len(),
        meta,
        command_status: run.command_status,
        continuous: None,
    })
}
