//! The pprof profile format (github.com/google/pprof, proto/profile.proto),
//! as hand-written prost messages: no protoc at build time. Written gzipped,
//! as `go tool pprof` expects.

use crate::model::{Image, ImageKind, Mode, Report};
use prost::Message;
use std::collections::HashMap;

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// Builds the pprof profile of a report: one mapping per image (the main
/// binary first), one location per (image, address, symbol), one function
/// per (image, symbol), a sample per row with its stack (leaf first), labelled
/// with comm, pid, mode and tags. Values: samples, and the sampled event's amount (ns of CPU
/// time for the clock events).
pub fn build(r: &Report) -> Profile {
    let mut st = Strings::new();
    let m = &r.meta;
    let clock = m.event.ends_with("-clock");
    let per_sample: i64 = match (m.freq, m.period) {
        (Some(f), _) if f > 0 && clock => (1_000_000_000 / f) as i64,
        (_, Some(p)) => p as i64,
        _ => 1,
    };
    let (unit_t, unit_u) = if clock {
        ("cpu", "nanoseconds")
    } else {
        (m.event.as_str(), "count")
    };
    let sample_type = vec![
        ValueType {
            r#type: st.id("samples"),
            unit: st.id("count"),
        },
        ValueType {
            r#type: st.id(unit_t),
            unit: st.id(unit_u),
        },
    ];
    let period_type = Some(ValueType {
        r#type: st.id(unit_t),
        unit: st.id(unit_u),
    });
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut map_ids: HashMap<(String, Option<String>), u64> = HashMap::new();
    let mut functions: Vec<Function> = Vec::new();
    let mut fn_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut locations: Vec<Location> = Vec::new();
    let mut loc_ids: HashMap<(u64, u64, String), u64> = HashMap::new();
    let mut samples = Vec::new();
    let (k_comm, k_pid, k_mode, k_tag) = (st.id("comm"), st.id("pid"), st.id("mode"), st.id("tag"));
    // pprof names the first mapping as the profile's main binary ("File:")
    if let Some(exe) = &r.main_binary {
        if let Some(im) = r
            .located
            .iter()
            .flat_map(|l| &l.frames)
            .find(|f| f.image.kind == ImageKind::Elf && f.image.path == *exe)
        {
            mapping_id(&mut st, &mut mappings, &mut map_ids, &im.image);
        }
    }
    for l in &r.located {
        let mut ids = Vec::with_capacity(l.frames.len());
        for (depth, f) in l.frames.iter().enumerate() {
            let mid = mapping_id(&mut st, &mut mappings, &mut map_ids, &f.image);
            let iname = f.image.display();
            let fkey = (iname.clone(), f.symbol.clone());
            let fid = match fn_ids.get(&fkey) {
                Some(&i) => i,
                None => {
                    let id = functions.len() as u64 + 1;
                    let name = st.id(&f.symbol);
                    functions.push(Function {
                        id,
                        name,
                        system_name: name,
                        filename: st.id(&iname),
                    });
                    fn_ids.insert(fkey, id);
                    id
                }
            };
            // a caller's address is its call instruction's (return - 1)
            let address = if depth == 0 {
                f.offset
            } else {
                f.offset.saturating_sub(1)
            };
            let lkey = (mid, address, f.symbol.clone());
            let lid = match loc_ids.get(&lkey) {
                Some(&i) => i,
                None => {
                    let id = locations.len() as u64 + 1;
                    locations.push(Location {
                        id,
                        mapping_id: mid,
                        address,
                        line: vec![Line {
                            function_id: fid,
                            line: 0,
                        }],
                    });
                    loc_ids.insert(lkey, id);
                    id
                }
            };
            ids.push(lid);
        }
        let mut label = vec![
            Label {
                key: k_comm,
                str: st.id(&l.comm),
                num: 0,
            },
            Label {
                key: k_pid,
                str: 0,
                num: l.pid as i64,
            },
            Label {
                key: k_mode,
                str: st.id(match l.mode {
                    Mode::User => "user",
                    Mode::Kernel => "kernel",
                }),
                num: 0,
            },
        ];
        for t in &l.tags {
            label.push(Label {
                key: k_tag,
                str: st.id(t),
                num: 0,
            });
        }
        samples.push(Sample {
            location_id: ids,
            value: vec![l.count as i64, l.count as i64 * per_sample],
            label,
        });
    }
    let comment = r.caveats.iter().map(|c| st.id(c)).collect();
    Profile {
        sample_type,
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: st.table,
        time_nanos: m.start_unix_ns as i64,
        duration_nanos: m.duration_ns as i64,
        period_type,
        period: per_sample,
        comment,
    }
}

/// The mapping of an image (one per path and build ID), added if new.
fn mapping_id(
    st: &mut Strings,
    mappings: &mut Vec<Mapping>,
    ids: &mut HashMap<(String, Option<String>), u64>,
    image: &Image,
) -> u64 {
    let key = (image.display(), image.build_id.clone());
    if let Some(&i) = ids.get(&key) {
        return i;
    }
    let id = mappings.len() as u64 + 1;
    mappings.push(Mapping {
        id,
        memory_start: 0,
        memory_limit: 0,
        file_offset: 0,
        filename: st.id(&key.0),
        build_id: st.id(image.build_id.as_deref().unwrap_or("")),
        has_functions: true,
    });
    ids.insert(key, id);
    id
}

/// The gzipped protobuf bytes.
pub fn encode_gz(p: &Profile) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&p.encode_to_vec()).expect("in-memory write");
    gz.finish().expect("in-memory write")
}
