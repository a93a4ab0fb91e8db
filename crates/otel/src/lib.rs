//! mantle's lifelines and executive traces as OpenTelemetry: OTLP over
//! HTTP with protobuf bodies, to an OpenTelemetry Collector, Jaeger or
//! Tempo (docs/otel.md).
//!
//! Mechanism: records become OTLP messages of the `opentelemetry-proto`
//! crate (prost-generated from the protocol's own .proto files; no
//! hand-written protobuf) in pure modules ([`lifeline`]: a tag's
//! receptions as spans with their causal parents; [`exec`]: the
//! executive's interposed calls as spans and its counts as metrics), and
//! leave through [`http`] (a small HTTP/1.1 client over `std::net`, every
//! step under one deadline) and [`queue`] (batches, retries with
//! exponential backoff within a retry window, bounded memory, counted
//! drops). [`follow`] reads lifeline rings as they grow for `mantle tags
//! export`. The hot path is not touched: the kernel side writes its rings
//! as before; readers copy from the mapped rings.
//!
//! Invariants: span and trace ids are computed alike on every machine
//! ([`ids`]); memory held by an exporter is bounded (queue, linker, per
//! tag state) and whatever is let go is counted; a collector that does
//! not answer costs at most the timeout per attempt. No locks: an exporter
//! is one thread (the executive's hands its lines over a channel).

pub mod exec;
pub mod follow;
pub mod http;
pub mod ids;
pub mod lifeline;
pub mod proto;
pub mod queue;

/// Errors of the exporters.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL cannot be used (a usage error).
    #[error("invalid OTLP URL {url:?}: {why}")]
    Url { url: String, why: String },
    /// The collector did not take the data (after the retries, if any).
    #[error("OTLP export to {url} failed: {why}")]
    Export { url: String, why: String },
    /// Reading the lifelines failed.
    #[error(transparent)]
    Tags(#[from] mantle_tags::Error),
}
