//! The pprof profile format (github.com/google/pprof, proto/profile.proto),
//! as hand-written prost messages: no protoc at build time. Written gzipped,
//! as `go tool pprof` expects.

use crate::model::{GraphRow, Image, ImageKind, Mode, Report, StackGraph};
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

/// A pprof profile without its samples, and what the samples need.
struct Prepared {
    head: Profile,
    /// Location id of each frame (0: no row reaches it).
    loc_of_frame: Vec<u64>,
    per_sample: i64,
    keys: (i64, i64, i64, i64),
    comm: HashMap<u32, i64>,
    user: i64,
    kernel: i64,
    tags: Vec<Vec<i64>>,
}

/// Everything but the samples: one mapping per image (the main binary
/// first), one location per frame (image, address; a caller's address is
/// its call instruction, return address − 1), one function per (image,
/// symbol); every string a sample's labels use.
fn prepare(r: &Report) -> Prepared {
    let g = &r.graph;
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
    let keys = (st.id("comm"), st.id("pid"), st.id("mode"), st.id("tag"));
    // pprof names the first mapping as the profile's main binary ("File:")
    if let Some(exe) = &r.main_binary {
        if let Some(im) = g
            .images
            .iter()
            .find(|im| im.kind == ImageKind::Elf && im.path == *exe)
        {
            mapping_id(&mut st, &mut mappings, &mut map_ids, im);
        }
    }
    let mut functions: Vec<Function> = Vec::new();
    let mut fn_ids: Vec<u64> = vec![0; g.funcs.len()];
    let mut locations: Vec<Location> = Vec::new();
    let mut loc_of_frame = vec![0u64; g.frames.len()];
    for (i, &(img, address)) in g.frames.iter().enumerate() {
        let func = g.frame_func[i];
        if func == u32::MAX {
            continue;
        }
        let mid = mapping_id(
            &mut st,
            &mut mappings,
            &mut map_ids,
            &g.images[img as usize],
        );
        let fid = match fn_ids[func as usize] {
            0 => {
                let f = &g.funcs[func as usize];
                let id = functions.len() as u64 + 1;
                let name = st.id(&f.symbol);
                functions.push(Function {
                    id,
                    name,
                    system_name: name,
                    filename: st.id(&f.image),
                });
                fn_ids[func as usize] = id;
                id
            }
            id => id,
        };
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
        loc_of_frame[i] = id;
    }
    let comm = g.comms.iter().map(|(&p, c)| (p, st.id(c))).collect();
    let tags = g
        .tagsets
        .iter()
        .map(|t| t.iter().map(|n| st.id(n)).collect())
        .collect();
    let (user, kernel) = (st.id("user"), st.id("kernel"));
    let comment = r.caveats.iter().map(|c| st.id(c)).collect();
    Prepared {
        head: Profile {
            sample_type,
            sample: Vec::new(),
            mapping: mappings,
            location: locations,
            function: functions,
            string_table: st.table,
            time_nanos: m.start_unix_ns as i64,
            duration_nanos: m.duration_ns as i64,
            period_type,
            period: per_sample,
            comment,
        },
        loc_of_frame,
        per_sample,
        keys,
        comm,
        user,
        kernel,
        tags,
    }
}

impl Prepared {
    /// The sample of one row: its stack leaf first, labelled with comm,
    /// pid, mode and tags; values samples and the event's amount.
    fn sample(&self, g: &StackGraph, row: &GraphRow) -> Sample {
        let (k_comm, k_pid, k_mode, k_tag) = self.keys;
        let location_id = std::iter::once(row.leaf)
            .chain(g.callers(row.stack).iter().copied())
            .map(|f| self.loc_of_frame[f as usize])
            .collect();
        let mut label = vec![
            Label {
                key: k_comm,
                str: self.comm.get(&row.pid).copied().unwrap_or(0),
                num: 0,
            },
            Label {
                key: k_pid,
                str: 0,
                num: row.pid as i64,
            },
            Label {
                key: k_mode,
                str: match row.mode {
                    Mode::User => self.user,
                    Mode::Kernel => self.kernel,
                },
                num: 0,
            },
        ];
        for &t in &self.tags[row.tags as usize] {
            label.push(Label {
                key: k_tag,
                str: t,
                num: 0,
            });
        }
        Sample {
            location_id,
            value: vec![
                row.count as i64,
                (row.count as i64).saturating_mul(self.per_sample),
            ],
            label,
        }
    }
}

/// Builds the whole pprof profile of a report in memory (see [`write_gz`]
/// for large ones).
pub fn build(r: &Report) -> Profile {
    let p = prepare(r);
    let mut head = p.head.clone();
    head.sample = r
        .graph
        .rows
        .iter()
        .map(|row| p.sample(&r.graph, row))
        .collect();
    head
}

/// Writes the gzipped profile with its samples encoded one at a time
/// (protobuf fields may come in any order, and a repeated field is its
/// elements one after another), so no list of samples is held.
pub fn write_gz(r: &Report, w: impl std::io::Write) -> std::io::Result<()> {
    use std::io::Write;
    let p = prepare(r);
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&p.head.encode_to_vec())?;
    let mut buf = Vec::new();
    for row in &r.graph.rows {
        buf.clear();
        let s = p.sample(&r.graph, row);
        // field 2 (sample), wire type 2 (length-delimited)
        prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut buf);
        prost::encoding::encode_varint(s.encoded_len() as u64, &mut buf);
        s.encode(&mut buf).expect("a Vec grows");
        gz.write_all(&buf)?;
    }
    gz.finish()?.flush()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{build_report, Frame, Meta, ReportOpts, RowKey, Symbolizer};
    type Samples = crate::model::Profile;

    struct Sym;
    impl Symbolizer for Sym {
        fn symbolize(&mut self, _: &Image, offsets: &[u64]) -> Vec<Option<String>> {
            offsets
                .iter()
                .map(|o| Some(format!("f{}", o / 0x100)))
                .collect()
        }
    }

    /// The samples written one at a time decode to the profile built whole.
    #[test]
    fn streamed_samples_decode_as_the_whole_profile() {
        let mut p = Samples::with_images(vec![Image::named("/bin/x", ImageKind::Elf)]);
        for (i, n) in [(1u64, 5u64), (2, 3), (3, 1)] {
            let callers: Vec<Frame> = (0..i)
                .map(|d| Frame {
                    image: 0,
                    offset: 0x1000 + d * 0x100 + 1,
                })
                .collect();
            let stack = p.stack_id(&callers);
            p.add_row(
                RowKey {
                    pid: 7,
                    tid: 7,
                    cpu: 0,
                    mode: Mode::User,
                    image: 0,
                    offset: 0x500 + i,
                    tags: vec![0; crate::abi::MT_WORDS],
                    stack,
                },
                n,
            )
            .unwrap();
        }
        let r = build_report(
            &p,
            &Default::default(),
            &[],
            &Meta::default(),
            &mut Sym,
            &ReportOpts::default(),
        );
        let mut gz = Vec::new();
        write_gz(&r, &mut gz).unwrap();
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
        let decoded = Profile::decode(&raw[..]).unwrap();
        let whole = build(&r);
        assert_eq!(decoded, whole);
        assert_eq!(decoded.sample.len(), 3);
        assert_eq!(decoded.sample.iter().map(|s| s.value[0]).sum::<i64>(), 9);
        assert!(decoded.sample.iter().any(|s| s.location_id.len() == 4));
    }
}
