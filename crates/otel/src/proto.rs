//! The OTLP messages mantle sends, from `opentelemetry-proto` (generated
//! by prost from the OpenTelemetry protocol's .proto files), and small
//! helpers to build them.

pub use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
pub use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
pub use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
pub use opentelemetry_proto::tonic::resource::v1::Resource;
pub use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, ScopeSpans, Span};

/// A string attribute.
pub fn str_attr(key: &str, v: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
        ..Default::default()
    }
}

/// An integer attribute.
pub fn int_attr(key: &str, v: i64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
        ..Default::default()
    }
}

/// A boolean attribute.
pub fn bool_attr(key: &str, v: bool) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::BoolValue(v)),
        }),
        ..Default::default()
    }
}
