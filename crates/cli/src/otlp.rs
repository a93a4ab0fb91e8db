//! OpenTelemetry out of mantle (docs/otel.md): `mantle tag lifeline NAME
//! --otlp URL` (one shot), `mantle tags export --otlp URL` (follows the
//! rings until stopped) and the glue of `mantle run --otlp URL`. The work
//! is mantle_otel's; this parses, reports and picks exit codes.

use crate::exit::{Failure, EXIT_FAILURE, EXIT_USAGE};
use clap::Args;
use mantle_otel::follow::{self, Options, Report};
use mantle_otel::http::Endpoint;
use mantle_otel::queue::Policy;
use std::path::PathBuf;
use std::time::Duration;

/// A duration option (crates/units: `500ms`, `10s`; bare numbers refused).
pub fn duration(s: &str) -> Result<Duration, String> {
    let d = mantle_units::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be more than 0".into());
    }
    Ok(d)
}

impl From<mantle_otel::Error> for Failure {
    fn from(e: mantle_otel::Error) -> Self {
        match e {
            mantle_otel::Error::Tags(t) => Failure::from(t),
            mantle_otel::Error::Url { .. } => Failure::new(EXIT_USAGE, e.to_string()),
            mantle_otel::Error::Export { .. } => Failure::new(EXIT_FAILURE, e.to_string()),
        }
    }
}

/// Parses the URL (a usage error if malformed).
pub fn endpoint(url: &str) -> Result<Endpoint, Failure> {
    Ok(Endpoint::parse(url)?)
}

/// `mantle tag lifeline NAME --otlp URL`.
pub fn lifeline(
    name: &str,
    merge: &[PathBuf],
    url: &str,
    timeout: Duration,
) -> Result<(), Failure> {
    let ep = endpoint(url)?;
    let records = crate::lifeline::records(name, merge)?;
    // The trace: a local tag's is this machine's and its creation's; a
    // tag only in saved files is taken for a global one (only global tags
    // cross machines).
    let host = mantle_sys::os::hostname();
    let trace = mantle_tags::Tags::open()
        .and_then(|t| t.info(t.lookup(name)?))
        .map(|i| follow::trace_of(&i, &host))
        .unwrap_or_else(|_| mantle_otel::lifeline::trace_id(name, None));
    let n = follow::send_once(&ep, trace, &records, timeout, 1000)?;
    println!(
        "sent {n} span(s) of tag {name} to {} (trace {})",
        ep.url_of("/v1/traces"),
        mantle_otel::ids::hex(&trace)
    );
    Ok(())
}

#[derive(Args)]
pub struct ExportArgs {
    /// The collector's OTLP/HTTP base URL (http://127.0.0.1:4318).
    #[arg(long, value_name = "URL")]
    otlp: String,
    /// Only these tags (comma-separated; each must have a lifeline);
    /// default: every tag with a lifeline, including those made later.
    #[arg(long, value_name = "A,B", value_delimiter = ',', value_parser = crate::flags::tag_name)]
    tags: Option<Vec<String>>,
    /// Skip what the rings hold at the start: send only receptions made
    /// from now on.
    #[arg(long)]
    new: bool,
    /// How often the rings are read.
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = duration)]
    poll: Duration,
    /// How long one request may take.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    timeout: Duration,
    /// How long spans wait for a collector that fails before they are
    /// dropped (counted).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
    retry_window: Duration,
    /// Spans held at most while the collector is slow or down; past it the
    /// oldest are dropped (counted).
    #[arg(long, value_name = "N", default_value_t = 65536, value_parser = clap::value_parser!(u64).range(1..=16_777_216))]
    max_queue: u64,
    /// Spans per request at most.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=65536))]
    batch: u64,
    /// Print the final report as JSON (docs/json.md).
    #[arg(long)]
    json: bool,
}

/// One line of what changed: failing or recovered, and the drops.
fn say(r: &Report, last: &mut (Option<String>, u64, u64)) {
    if r.failing != last.0 {
        match &r.failing {
            Some(why) => eprintln!("mantle: tags export: the collector fails: {why} (retrying)"),
            None => eprintln!("mantle: tags export: the collector takes spans again"),
        }
        last.0 = r.failing.clone();
    }
    let dropped = r.queue.dropped();
    if dropped != last.1 || r.lost_in_ring != last.2 {
        eprintln!(
            "mantle: tags export: dropped {dropped} span(s) (queue full {}, past the retry window {}, refused {}); {} reception(s) overwritten in the rings before they were read",
            r.queue.dropped_full, r.queue.dropped_expired, r.queue.dropped_rejected, r.lost_in_ring
        );
        (last.1, last.2) = (dropped, r.lost_in_ring);
    }
}

/// `mantle tags export`.
pub fn export(a: ExportArgs) -> Result<(), Failure> {
    let ep = endpoint(&a.otlp)?;
    let o = Options {
        tags: a.tags,
        backlog: !a.new,
        poll: a.poll,
        timeout: a.timeout,
        policy: Policy {
            batch: a.batch as usize,
            max_queued: a.max_queue as usize,
            retry_window: a.retry_window,
            ..Policy::default()
        },
        ..Options::default()
    };
    mantle_sys::os::catch_stop_signals();
    let mut last = (None, 0, 0);
    let stop = || mantle_sys::os::stop_requested();
    let mut progress = |r: &Report| say(r, &mut last);
    let mut started = false;
    let r = follow::run(&ep, &o, &stop, &mut |r| {
        if !started {
            started = true;
            eprintln!(
                "mantle: tags export: sending {} tag(s) to {}",
                r.tags,
                ep.url_of("/v1/traces")
            );
        }
        progress(r)
    })?;
    if a.json {
        crate::render::print_json(&r);
    } else {
        println!(
            "tags export: {} reception(s) read, {} span(s) sent, {} dropped (queue full {}, past the retry window {}, refused {}), {} overwritten in the rings before they were read, {} failed request(s)",
            r.receptions,
            r.queue.sent,
            r.queue.dropped(),
            r.queue.dropped_full,
            r.queue.dropped_expired,
            r.queue.dropped_rejected,
            r.lost_in_ring,
            r.queue.failures
        );
    }
    Ok(())
}

/// `mantle run --otlp`'s export, made before the executive forks (the
/// executive's process inherits it; its sender thread starts there).
static EXEC: std::sync::OnceLock<mantle_otel::exec::ExecExport> = std::sync::OnceLock::new();

/// `mantle run --otlp URL`: checks the options and starts the export;
/// the guests' trace lines are then JSON, for the exporter.
pub fn exec_start(
    url: Option<&str>,
    defs: &mut [mantle_exec::system::GuestDef],
) -> Result<(), Failure> {
    let Some(url) = url else { return Ok(()) };
    let ep = endpoint(url)?;
    if !defs.iter().any(|d| d.agents.trace || d.agents.count) {
        return Err(Failure::new(
            EXIT_USAGE,
            "--otlp sends what --trace and --count see: give one of them",
        ));
    }
    for d in defs.iter_mut() {
        d.agents.json = true;
    }
    let name = match defs {
        [d] => d.name.clone(),
        _ => format!("system of {} guests", defs.len()),
    };
    let _ = EXEC.set(mantle_otel::exec::ExecExport::new(
        ep,
        Duration::from_secs(5),
        &name,
    ));
    Ok(())
}

/// Where guest `name`'s trace goes: the exporter with --otlp.
pub fn exec_writer(
    name: &str,
    out: &mantle_exec::spec::TraceOut,
) -> Result<Box<dyn std::io::Write + Send>, Failure> {
    match EXEC.get() {
        Some(x) => Ok(x.writer(name)),
        None => crate::run::trace_writer(out),
    }
}

/// The end of a run: with --otlp, sends what is left and the counts, says
/// what was sent and dropped, and returns true (the counts are not
/// printed then).
pub fn exec_end(
    counts: &[(
        String,
        Option<std::sync::Arc<mantle_exec::agents::CountTable>>,
        bool,
    )],
) -> bool {
    let Some(x) = EXEC.get() else { return false };
    let summaries: Vec<(String, serde_json::Value)> = counts
        .iter()
        .filter_map(|(n, c, _)| c.as_ref().map(|c| (n.clone(), c.summary().to_json())))
        .collect();
    let r = x.finish(&summaries);
    eprintln!(
        "mantle: otlp: trace {}: {} span(s) sent, {} dropped{}{}",
        x.trace_id_hex(),
        r.spans.sent,
        r.spans.dropped(),
        if summaries.is_empty() {
            String::new()
        } else {
            format!(", {} count point(s) sent", r.metric_points)
        },
        match &r.failing {
            Some(w) => format!(" (the collector fails: {w})"),
            None => String::new(),
        }
    );
    true
}
