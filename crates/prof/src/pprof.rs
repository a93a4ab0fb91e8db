//! The pprof profile format (github.com/google/pprof, proto/profile.proto),
//! as hand-written prost messages: no protoc at build time. Written gzipped,
//! as `go tool pprof` expects.

use crate::model::{GraphRow, Image, ImageKind, Mode, Report, StackGraph, NO_FILE};
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
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
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
    #[prost(int64, tag = "5")]
    pub start_line: i64,
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
    /// The same for the off-CPU graph (`record --off-cpu`).
    loc_of_frame_off: Vec<u64>,
    /// Whether the profile has the third sample type, off_cpu/nanoseconds.
    off_cpu: bool,
    per_sample: i64,
    keys: (i64, i64, i64, i64),
    comm: HashMap<u32, i64>,
    user: i64,
    kernel: i64,
    tags: Vec<Vec<i64>>,
    /// The `cgroup` label's key, and each cgroup's path (string ids, by
    /// [`StackGraph::cgroups`] index; 0 for a row without a cgroup).
    cgroup_key: i64,
    cgroups: Vec<i64>,
}

/// Everything but the samples: one mapping per image (the main binary
/// first; its recorded range, [`Maps`]), one location per frame (image,
/// address; a caller's address is its call instruction, return address
/// − 1) with its source lines (inlined calls first), one function per
/// (name, source file) with its first line; every string a sample's
/// labels use. With off-CPU time (`record --off-cpu`) a third sample
/// type, `off_cpu`/`nanoseconds`: the on-CPU samples have 0 there, and
/// each off-CPU row is a sample with 0 samples, 0 CPU time and its
/// blocked time, its stack in the same locations and functions.
fn prepare(r: &Report) -> Prepared {
    let g = &r.graph;
    let graphs: Vec<&StackGraph> = std::iter::once(g)
        .chain(r.off_cpu.as_ref().map(|o| &o.graph))
        .collect();
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
    let mut sample_type = vec![
        ValueType {
            r#type: st.id("samples"),
            unit: st.id("count"),
        },
        ValueType {
            r#type: st.id(unit_t),
            unit: st.id(unit_u),
        },
    ];
    if r.off_cpu.is_some() {
        sample_type.push(ValueType {
            r#type: st.id("off_cpu"),
            unit: st.id("nanoseconds"),
        });
    }
    let period_type = Some(ValueType {
        r#type: st.id(unit_t),
        unit: st.id(unit_u),
    });
    // each image's frames: where its mapping goes
    let mut span: Vec<Option<(u64, u64)>> = vec![None; g.images.len()];
    for gr in &graphs {
        for (i, &(img, a)) in gr.frames.iter().enumerate() {
            if gr.frame_func.get(i).is_some_and(|&f| f != u32::MAX) {
                let s = &mut span[img as usize];
                *s = Some(s.map_or((a, a), |(lo, hi)| (lo.min(a), hi.max(a))));
            }
        }
    }
    let maps = Maps::new(&graphs, &span);
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut map_ids: HashMap<(String, Option<String>), u64> = HashMap::new();
    let keys = (st.id("comm"), st.id("pid"), st.id("mode"), st.id("tag"));
    // pprof names the first mapping as the profile's main binary ("File:")
    if let Some(exe) = &r.main_binary {
        if let Some(i) = g
            .images
            .iter()
            .position(|im| im.kind == ImageKind::Elf && im.path == *exe)
        {
            mapping_id(&mut st, &mut mappings, &mut map_ids, &maps, i);
        }
    }
    let mut functions: Vec<Function> = Vec::new();
    // functions by (name, source file name): the two graphs number their
    // files each their own way
    let mut fn_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut function =
        |st: &mut Strings, g: &StackGraph, name: &str, file: u32, start: u32| -> u64 {
            let fname = g.file(file).unwrap_or("").to_string();
            *fn_ids
                .entry((name.to_string(), fname))
                .or_insert_with_key(|k| {
                    let id = functions.len() as u64 + 1;
                    let n = st.id(name);
                    functions.push(Function {
                        id,
                        name: n,
                        system_name: n,
                        // no source: no file (pprof -list would print the ELF)
                        filename: st.id(&k.1),
                        start_line: start as i64,
                    });
                    id
                })
        };
    let mut locations: Vec<Location> = Vec::new();
    let mut loc_of: Vec<Vec<u64>> = Vec::new();
    for g in &graphs {
        let mut loc_of_frame = vec![0u64; g.frames.len()];
        for (i, &(img, offset)) in g.frames.iter().enumerate() {
            let func = g.frame_func[i];
            if func == u32::MAX {
                continue;
            }
            let mid = mapping_id(&mut st, &mut mappings, &mut map_ids, &maps, img as usize);
            let (ffile, fstart) = g
                .func_src
                .get(func as usize)
                .copied()
                .unwrap_or((NO_FILE, 0));
            let (file, line) = g.frame_src.get(i).copied().unwrap_or((NO_FILE, 0));
            // the outer function's file: where the address's line is, else
            // where the function starts
            let ffile = if file != NO_FILE { file } else { ffile };
            let outer = function(&mut st, g, &g.funcs[func as usize].symbol, ffile, fstart);
            // innermost inlined call first, the outer function last
            let mut lines: Vec<Line> = g
                .frame_inlined
                .get(&(i as u32))
                .into_iter()
                .flatten()
                .rev()
                .map(|(n, f, l)| Line {
                    function_id: function(&mut st, g, n, *f, 0),
                    line: *l as i64,
                })
                .collect();
            lines.push(Line {
                function_id: outer,
                line: line as i64,
            });
            let id = locations.len() as u64 + 1;
            locations.push(Location {
                id,
                mapping_id: mid,
                address: maps.address(img as usize, offset),
                line: lines,
            });
            loc_of_frame[i] = id;
        }
        loc_of.push(loc_of_frame);
    }
    let mut loc_of = loc_of.into_iter();
    let loc_of_frame = loc_of.next().unwrap_or_default();
    let loc_of_frame_off = loc_of.next().unwrap_or_default();
    let comm = graphs
        .iter()
        .flat_map(|g| g.comms.iter())
        .map(|(&p, c)| (p, st.id(c)))
        .collect();
    let tags = g
        .tagsets
        .iter()
        .map(|t| t.iter().map(|n| st.id(n)).collect())
        .collect();
    let (user, kernel) = (st.id("user"), st.id("kernel"));
    let cgroup_key = st.id("cgroup");
    let cgroups = g
        .cgroups
        .iter()
        .map(|(id, path)| if *id == 0 { 0 } else { st.id(path) })
        .collect();
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
        loc_of_frame_off,
        off_cpu: r.off_cpu.is_some(),
        per_sample,
        keys,
        cgroup_key,
        cgroups,
        comm,
        user,
        kernel,
        tags,
    }
}

impl Prepared {
    /// The sample of one row: its stack leaf first, labelled with comm,
    /// pid, mode, tags and cgroup (its path); values samples and the event's amount.
    fn sample(&self, g: &StackGraph, row: &GraphRow) -> Sample {
        let mut s = self.sample_of(g, row, &self.loc_of_frame, true);
        s.value = vec![
            row.count as i64,
            (row.count as i64).saturating_mul(self.per_sample),
        ];
        if self.off_cpu {
            s.value.push(0);
        }
        s
    }

    /// The sample of one off-CPU row (`count` in ns): off_cpu only.
    fn sample_off(&self, g: &StackGraph, row: &GraphRow) -> Sample {
        let mut s = self.sample_of(g, row, &self.loc_of_frame_off, false);
        s.value = vec![0, 0, i64::try_from(row.count).unwrap_or(i64::MAX)];
        s
    }

    /// A row's locations and labels (tags only for on-CPU rows: the
    /// off-CPU path records none); no values yet.
    fn sample_of(&self, g: &StackGraph, row: &GraphRow, loc: &[u64], tags: bool) -> Sample {
        let (k_comm, k_pid, k_mode, k_tag) = self.keys;
        let location_id = std::iter::once(row.leaf)
            .chain(g.callers(row.stack).iter().copied())
            .map(|f| loc[f as usize])
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
        if tags {
            for &t in &self.tags[row.tags as usize] {
                label.push(Label {
                    key: k_tag,
                    str: t,
                    num: 0,
                });
            }
        }
        match self.cgroups.get(row.cgroup as usize) {
            Some(&c) if c != 0 => label.push(Label {
                key: self.cgroup_key,
                str: c,
                num: 0,
            }),
            _ => {}
        }
        Sample {
            location_id,
            value: Vec::new(),
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
    if let Some(off) = &r.off_cpu {
        head.sample.extend(
            off.graph
                .rows
                .iter()
                .map(|row| p.sample_off(&off.graph, row)),
        );
    }
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
    let off = r.off_cpu.as_ref().map(|o| &o.graph);
    let rows = r
        .graph
        .rows
        .iter()
        .map(|row| p.sample(&r.graph, row))
        .chain(
            off.into_iter()
                .flat_map(|g| g.rows.iter().map(move |row| (g, row)))
                .map(|(g, row)| p.sample_off(g, row)),
        );
    for s in rows {
        buf.clear();
        // field 2 (sample), wire type 2 (length-delimited)
        prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut buf);
        prost::encoding::encode_varint(s.encoded_len() as u64, &mut buf);
        s.encode(&mut buf).expect("a Vec grows");
        gz.write_all(&buf)?;
    }
    gz.finish()?.flush()
}

/// Where each image's frames go in pprof's address space. An image with
/// a recorded executable mapping (start, end, file offset) keeps it: a
/// frame at file offset `o` is at `start + o - pgoff`, as it was in the
/// process. Others (the kernel, JIT code, a session without mappings)
/// span their frames' addresses, which are already addresses or file
/// offsets (then the mapping's file offset is its start, so pprof's
/// address-to-offset rule gives the offset back).
struct Maps {
    /// Per image: (memory start, limit, file offset) and whether the
    /// frames' values are file offsets to convert.
    m: Vec<((u64, u64, u64), bool)>,
    has_files: Vec<bool>,
    has_lines: Vec<bool>,
    has_inline: Vec<bool>,
    names: Vec<String>,
    build_ids: Vec<Option<String>>,
}

impl Maps {
    /// `graphs[0]` is the report's; the others (off-CPU) share its
    /// images.
    fn new(graphs: &[&StackGraph], span: &[Option<(u64, u64)>]) -> Maps {
        let g = graphs[0];
        let n = g.images.len();
        let (mut files, mut lines, mut inline) = (vec![false; n], vec![false; n], vec![false; n]);
        for gr in graphs {
            for (i, &(img, _)) in gr.frames.iter().enumerate() {
                if let Some(&(f, l)) = gr.frame_src.get(i) {
                    files[img as usize] |= f != NO_FILE;
                    lines[img as usize] |= l != 0;
                }
                inline[img as usize] |= gr.frame_inlined.contains_key(&(i as u32));
            }
        }
        let m = g
            .images
            .iter()
            .enumerate()
            .map(|(i, im)| {
                let rec = g.image_maps.get(i).copied().flatten();
                match (im.kind, rec) {
                    (ImageKind::Elf | ImageKind::Vdso, Some(r)) => (r, true),
                    _ => {
                        let (lo, hi) = span[i].unwrap_or((0, 0));
                        let file_off = if matches!(im.kind, ImageKind::Elf | ImageKind::Vdso) {
                            lo
                        } else {
                            0
                        };
                        ((lo, hi.saturating_add(1), file_off), false)
                    }
                }
            })
            .collect();
        Maps {
            m,
            has_files: files,
            has_lines: lines,
            has_inline: inline,
            names: g.images.iter().map(Image::display).collect(),
            build_ids: g.images.iter().map(|i| i.build_id.clone()).collect(),
        }
    }

    /// The address of a frame at `offset` in image `img`.
    fn address(&self, img: usize, offset: u64) -> u64 {
        match self.m[img] {
            ((start, _, pgoff), true) => start.wrapping_add(offset.wrapping_sub(pgoff)),
            _ => offset,
        }
    }
}

/// The mapping of an image (one per path and build ID), added if new.
fn mapping_id(
    st: &mut Strings,
    mappings: &mut Vec<Mapping>,
    ids: &mut HashMap<(String, Option<String>), u64>,
    maps: &Maps,
    img: usize,
) -> u64 {
    let key = (maps.names[img].clone(), maps.build_ids[img].clone());
    if let Some(&i) = ids.get(&key) {
        return i;
    }
    let id = mappings.len() as u64 + 1;
    let ((start, limit, file_offset), _) = maps.m[img];
    mappings.push(Mapping {
        id,
        memory_start: start,
        memory_limit: limit,
        file_offset,
        filename: st.id(&key.0),
        build_id: st.id(key.1.as_deref().unwrap_or("")),
        has_functions: true,
        has_filenames: maps.has_files[img],
        has_line_numbers: maps.has_lines[img],
        has_inline_frames: maps.has_inline[img],
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
    use crate::model::{build_report, Frame, Meta, ReportOpts, RowKey, SymInfo, Symbolizer};
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

    /// Names, lines and inlined calls, as a DWARF symbolizer finds them.
    struct Lines;
    impl Symbolizer for Lines {
        fn symbolize(&mut self, i: &Image, offsets: &[u64]) -> Vec<Option<String>> {
            self.locate(i, offsets)
                .into_iter()
                .map(|s| s.map(|s| s.name))
                .collect()
        }
        fn locate(&mut self, _: &Image, offsets: &[u64]) -> Vec<Option<SymInfo>> {
            offsets
                .iter()
                .map(|&o| {
                    Some(SymInfo {
                        name: "outer".into(),
                        file: Some("/src/x.c".into()),
                        line: 10 + (o & 0xf) as u32,
                        start_line: 7,
                        // the leaf has `helper` inlined, called at line 12
                        inlined: if o == 0x502 {
                            vec![("helper".into(), Some("/src/h.h".into()), 3)]
                        } else {
                            vec![]
                        },
                        ..Default::default()
                    })
                })
                .collect()
        }
    }

    /// pprof gets each address's source line, the function's file and
    /// first line, inlined calls innermost first, and the image's recorded
    /// mapping (the addresses as they were in the process).
    #[test]
    fn locations_carry_source_lines_and_real_addresses() {
        let mut p = Samples::with_images(vec![Image {
            build_id: Some("abcd".into()),
            ..Image::named("/bin/x", ImageKind::Elf)
        }]);
        let stack = p.stack_id(&[Frame {
            image: 0,
            offset: 0x1005,
        }]);
        p.add_row(
            RowKey {
                pid: 7,
                tid: 7,
                cpu: 0,
                mode: Mode::User,
                image: 0,
                offset: 0x502,
                tags: vec![0; crate::abi::MT_WORDS],
                stack,
                cgroup: 0,
            },
            4,
        )
        .unwrap();
        let mut r = build_report(
            &p,
            &Default::default(),
            &[],
            &Meta::default(),
            &mut Lines,
            &ReportOpts::default(),
        );
        // mapped at 0x5555_0000 from file offset 0
        r.graph.image_maps = vec![Some((0x5555_0000, 0x5556_0000, 0))];
        let pb = build(&r);
        let s = |i: i64| pb.string_table[i as usize].as_str();
        let m = &pb.mapping[0];
        assert_eq!(
            (m.memory_start, m.memory_limit, m.file_offset),
            (0x5555_0000, 0x5556_0000, 0)
        );
        assert_eq!(s(m.build_id), "abcd");
        assert!(m.has_functions && m.has_filenames && m.has_line_numbers && m.has_inline_frames);
        let func = |id: u64| pb.function.iter().find(|f| f.id == id).unwrap();
        let leaf = pb
            .location
            .iter()
            .find(|l| l.address == 0x5555_0502)
            .expect("leaf at its real address");
        let lines: Vec<(&str, &str, i64)> = leaf
            .line
            .iter()
            .map(|l| {
                let f = func(l.function_id);
                (s(f.name), s(f.filename), l.line)
            })
            .collect();
        assert_eq!(
            lines,
            [("helper", "/src/h.h", 3), ("outer", "/src/x.c", 12)]
        );
        let outer = pb.function.iter().find(|f| s(f.name) == "outer").unwrap();
        assert_eq!(outer.start_line, 7);
        // the caller at its call instruction (return address - 1)
        let caller = pb
            .location
            .iter()
            .find(|l| l.address == 0x5555_1004)
            .expect("caller");
        assert_eq!(caller.line[0].line, 14);
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
                    cgroup: 0,
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
