//! Unit tests of the pure core: replay, aggregation, kallsyms, report
//! tables and text.

use super::*;

struct FakeSym;
impl Symbolizer for FakeSym {
    fn symbolize(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<String>> {
        offsets
            .iter()
            .map(|o| match image.kind {
                ImageKind::Elf if *o < 0x2000 => Some("slow".into()),
                ImageKind::Elf if *o < 0x3000 => Some("fast".into()),
                _ => None,
            })
            .collect()
    }
}

fn spaces() -> AddressSpaces {
    let mut s = AddressSpaces::new(vec!["mantle".into()]);
    s.add_process(10, 1, "app");
    s.mmap(
        10,
        Mapping {
            start: 0x400000,
            end: 0x403000,
            pgoff: 0x1000,
            path: "/bin/app".into(),
            build_id: Some("ab".into()),
        },
    );
    s.mmap(
        10,
        Mapping {
            start: 0x7fff0000,
            end: 0x7fff2000,
            pgoff: 0,
            path: "[vdso]".into(),
            build_id: None,
        },
    );
    s.add_process(20, 1, "mantle");
    s
}

fn raw(pid: u32, ip: u64, mode: Mode, tags: u64) -> RawSample {
    RawSample {
        pid,
        tid: pid,
        cpu: 0,
        mode,
        ip,
        tags: vec![tags],
        cgroup: 0,
    }
}

#[test]
fn resolves_files_vdso_kernel_unknown() {
    let s = spaces();
    let r = s.resolve(10, 0x400010, Mode::User);
    assert_eq!(r.image.path, "/bin/app");
    assert_eq!(r.offset, 0x1010);
    assert_eq!(r.image.build_id.as_deref(), Some("ab"));
    let r = s.resolve(10, 0x7fff0100, Mode::User);
    assert_eq!((r.image.kind, r.offset), (ImageKind::Vdso, 0x100));
    let r = s.resolve(10, 0xffffffff81000000, Mode::Kernel);
    assert_eq!(r.image.kind, ImageKind::Kernel);
    let r = s.resolve(10, 0x500000, Mode::User);
    assert_eq!(r.image.kind, ImageKind::Unknown);
    let r = s.resolve(99, 0x400010, Mode::User);
    assert_eq!(r.image.kind, ImageKind::Unknown);
}

#[test]
fn fork_copies_exec_replaces_exit_keeps() {
    let mut s = spaces();
    s.fork(11, 10, 11);
    assert_eq!(s.resolve(11, 0x400010, Mode::User).image.path, "/bin/app");
    s.fork(10, 10, 12); // a thread: nothing new
    assert!(!s.procs.contains_key(&12));
    s.comm(11, 11, "other", true);
    // until the new program maps something there, a sample taken before
    // the exec still resolves in the old address space
    assert_eq!(s.resolve(11, 0x400010, Mode::User).image.path, "/bin/app");
    s.mmap(
        11,
        Mapping {
            start: 0x400000,
            end: 0x401000,
            pgoff: 0,
            path: "/bin/other".into(),
            build_id: None,
        },
    );
    s.exit(11, 11);
    assert!(s.procs[&11].exited);
    assert_eq!(s.resolve(11, 0x400010, Mode::User).image.path, "/bin/other");
    // the parent is untouched
    assert_eq!(s.resolve(10, 0x400010, Mode::User).image.path, "/bin/app");
}

#[test]
fn mmap_replaces_overlaps() {
    let mut s = spaces();
    s.mmap(
        10,
        Mapping {
            start: 0x402000,
            end: 0x404000,
            pgoff: 0,
            path: "/lib/x.so".into(),
            build_id: None,
        },
    );
    assert_eq!(
        s.resolve(10, 0x400010, Mode::User).image.kind,
        ImageKind::Unknown
    );
    assert_eq!(s.resolve(10, 0x403010, Mode::User).image.path, "/lib/x.so");
}

#[test]
fn maps_line() {
    let m = parse_maps_line("55d4c8a00000-55d4c8a21000 r-xp 00002000 fe:01 1234   /usr/bin/cat")
        .unwrap();
    assert_eq!(m.start, 0x55d4c8a00000);
    assert_eq!(m.pgoff, 0x2000);
    assert_eq!(m.path, "/usr/bin/cat");
    assert!(parse_maps_line("00400000-00401000 rw-p 00000000 00:00 0").is_none());
    let a = parse_maps_line("00400000-00401000 r-xp 00000000 00:00 0").unwrap();
    assert_eq!(a.path, "//anon");
    let p = parse_maps_line("00400000-00401000 r-xp 00000000 00:00 0  /a b/c").unwrap();
    assert_eq!(p.path, "/a b/c");
}

#[test]
fn aggregation_merges_equal_keys() {
    let s = spaces();
    let mut p = Profile::default();
    p.add(&s, &raw(10, 0x400010, Mode::User, 0), 3).unwrap();
    p.add(&s, &raw(10, 0x400010, Mode::User, 0), 4).unwrap();
    p.add(&s, &raw(10, 0x400010, Mode::User, 1), 1).unwrap();
    p.add(&s, &raw(10, 0xffffffff81000000, Mode::Kernel, 0), 2)
        .unwrap();
    assert_eq!(p.counts().len(), 3);
    assert_eq!(p.total(), 10);
    assert_eq!(p.images.len(), 2);
}

#[test]
fn counts_that_would_overflow_are_refused_and_change_nothing() {
    let s = spaces();
    let mut p = Profile::default();
    p.add(&s, &raw(10, 0x400010, Mode::User, 0), u64::MAX)
        .unwrap();
    assert_eq!(
        p.add(&s, &raw(10, 0x400020, Mode::User, 0), 1),
        Err(CountOverflow)
    );
    assert_eq!(
        p.add(&s, &raw(10, 0x400010, Mode::User, 0), 1),
        Err(CountOverflow)
    );
    assert_eq!(p.total(), u64::MAX);
    assert_eq!(
        p.counts().values().copied().collect::<Vec<_>>(),
        vec![u64::MAX]
    );
}

#[test]
fn tags_hex_roundtrip() {
    assert_eq!(tags_hex(&[0]), "0");
    assert_eq!(tags_hex(&[0x5]), "5");
    assert_eq!(tags_hex(&[1, 2]), "20000000000000001");
    assert_eq!(parse_tags_hex("20000000000000001", 2), Some(vec![1, 2]));
    assert_eq!(parse_tags_hex("5", 1), Some(vec![5]));
    assert_eq!(parse_tags_hex("0", 2), Some(vec![0, 0]));
    assert_eq!(parse_tags_hex("20000000000000001", 1), None);
    assert_eq!(parse_tags_hex("+5", 1), None);
    assert_eq!(parse_tags_hex(" 5", 1), None);
    assert_eq!(parse_tags_hex("", 1), None);
    assert_eq!(parse_tags_hex("0\u{e9}000000000000000", 1), None); // sliced inside a character before
    assert_eq!(tag_bits(&[0b101, 1]), vec![0, 2, 64]);
}

#[test]
fn kallsyms_lookup() {
    let k = Kallsyms::parse(
        "ffffffff81000000 T _stext\nffffffff81000100 t do_thing\nffffffff81000200 D data\nffffffffc0000000 t modfn\t[mod]\n0000000000000000 T hidden\n",
    );
    assert_eq!(k.len(), 3);
    assert_eq!(k.lookup(0xffffffff81000150), Some("do_thing"));
    assert_eq!(k.lookup(0xffffffff81000000), Some("_stext"));
    assert_eq!(k.lookup(0xffffffffc0000010), Some("modfn [mod]"));
    assert_eq!(k.lookup(0x1000), None);
    let k = Kallsyms::parse(
        "ffffffff82000000 T memset\nffffffff82000000 T __memset\nffffffff82000000 T __pi_memset\nffffffff82000100 T next\n",
    );
    assert_eq!(k.lookup(0xffffffff82000010), Some("__pi_memset"));
}

fn report(by_tag: bool) -> Report {
    let s = spaces();
    let mut p = Profile::default();
    p.add(&s, &raw(10, 0x400010, Mode::User, 0), 60).unwrap(); // slow, untagged
    p.add(&s, &raw(10, 0x401010, Mode::User, 1), 30).unwrap(); // fast, tag a
    p.add(&s, &raw(10, 0xffffffff81000010, Mode::Kernel, 1), 5)
        .unwrap();
    p.add(&s, &raw(0, 0xffffffff81000010, Mode::Kernel, 0), 4)
        .unwrap();
    p.add(&s, &raw(20, 0x999, Mode::User, 0), 1).unwrap();
    let tags = vec![TagName {
        bit: 0,
        name: "a".into(),
    }];
    build_report(
        &p,
        &s.procs,
        &tags,
        &Meta::default(),
        &mut FakeSym,
        &ReportOpts {
            by_tag,
            ..Default::default()
        },
    )
}

#[test]
fn report_tables() {
    let r = report(false);
    assert_eq!(r.total, 100);
    assert_eq!(r.symbols[0].symbol, "slow");
    assert_eq!(r.symbols[0].percent, 60.0);
    assert_eq!(r.symbols[1].symbol, "fast");
    assert_eq!(r.images[0].image, "/bin/app");
    assert_eq!(r.images[0].samples, 90);
    let comp: Vec<(&str, u64)> = r
        .components
        .iter()
        .map(|c| (c.component.as_str(), c.samples))
        .collect();
    assert_eq!(comp, vec![("app[10]", 95), ("[idle]", 4), ("[mantle]", 1)]);
    // the kernel time of app is app's (issue 33: it was one `[kernel]`
    // row for every process)
    let app = &r.components[0];
    assert_eq!((app.user, app.kernel), (90, 5));
    assert!(r.by_tag.is_none());
    let text = render_text(&r);
    assert!(text.contains("Per component:"), "{text}");
    assert!(text.contains("slow"));
    let folded: u64 = r.folded().iter().map(|f| f.1).sum();
    assert_eq!(folded, 100);
    assert!(r.folded().iter().any(|(l, _)| l == "app[10];slow"));
}

#[test]
fn report_by_tag() {
    let r = report(true);
    let t = r.by_tag.as_ref().unwrap();
    assert_eq!(t[0].tag, "a");
    assert_eq!(t[0].samples, 35);
    assert_eq!(t[0].processes[0].component, "app[10]");
    assert_eq!(t[0].processes[0].user, 30);
    assert_eq!(t[0].processes[0].kernel, 5);
    assert_eq!(t[0].symbols[0].symbol, "fast");
    assert_eq!(t[1].tag, "(untagged)");
    assert_eq!(t[1].samples, 65);
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["by_tag"][0]["tag"], "a");
    assert_eq!(j["symbols"][0]["symbol"], "slow");
}

#[test]
fn caveats_name_fallback_and_throttling() {
    let m = Meta {
        event: "cpu-clock".into(),
        fallback_from: Some("cycles".into()),
        throttle_events: 2,
        max_sample_rate_start: Some(100000),
        max_sample_rate_end: Some(50000),
        kernel_symbols: true,
        ..Default::default()
    };
    let c = m.caveats().join("\n");
    assert!(c.contains("cycles is not available"));
    assert!(c.contains("throttled sampling 2"));
    assert!(c.contains("100000 -> 50000"));
}

/// /bin/app at 0x400000 (file offset 0x1000): main, a, b, c, 0x100 bytes
/// each; /lib/libs.so at 0x500000 has no symbols (a stripped library).
struct StackSym;
impl Symbolizer for StackSym {
    fn symbolize(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<String>> {
        offsets
            .iter()
            .map(|o| match (image.path.as_str(), o) {
                ("/bin/app", 0x1000..0x1100) => Some("main".into()),
                ("/bin/app", 0x1100..0x1200) => Some("a".into()),
                ("/bin/app", 0x1200..0x1300) => Some("b".into()),
                ("/bin/app", 0x1300..0x1400) => Some("c".into()),
                _ => None,
            })
            .collect()
    }
}

/// main -> a -> b (40), main -> c -> b (30), a (10), c (20), and two
/// addresses of a stripped library called from main (3 and 4).
fn stack_report(root: FlameRoot) -> Report {
    let mut s = spaces();
    s.mmap(
        10,
        Mapping {
            start: 0x500000,
            end: 0x501000,
            pgoff: 0,
            path: "/lib/libs.so".into(),
            build_id: None,
        },
    );
    let mut p = Profile::default();
    let main_ret = 0x400050;
    // a's call to b is its last instruction: it returns to b's first byte,
    // which is symbolized at the call (-1), in a
    let a_ret = 0x400200;
    let c_ret = 0x400350;
    let rows: [(u64, &[u64], u64); 6] = [
        (0x400210, &[a_ret, main_ret], 40),
        (0x400220, &[c_ret, main_ret], 30),
        (0x400110, &[main_ret], 10),
        (0x400310, &[main_ret], 20),
        (0x500010, &[main_ret], 3),
        (0x500020, &[main_ret], 4),
    ];
    for (ip, callers, n) in rows {
        let r = s.resolve(10, ip, Mode::User);
        let id = p.add_stack(&s, 10, callers, &mut |_| {});
        p.add_resolved(&raw(10, ip, Mode::User, 0), &r, id, n)
            .unwrap();
    }
    // no stack: counts for itself only
    p.add(&s, &raw(10, 0x400120, Mode::User, 0), 3).unwrap();
    build_report(
        &p,
        &s.procs,
        &[],
        &Meta::default(),
        &mut StackSym,
        &ReportOpts {
            flame_root: root,
            ..Default::default()
        },
    )
}

#[test]
fn stacks_give_inclusive_shares_and_call_edges() {
    let r = stack_report(FlameRoot::Process);
    assert!(r.stacks);
    assert_eq!(r.total, 110);
    let inc = |sym: &str| {
        r.inclusive
            .iter()
            .find(|s| s.symbol == sym)
            .map(|s| s.samples)
    };
    assert_eq!(inc("main"), Some(107));
    assert_eq!(inc("a"), Some(53));
    assert_eq!(inc("b"), Some(70));
    assert_eq!(inc("c"), Some(50));
    let b = call_graph(&r, "b").unwrap();
    assert_eq!((b.inclusive, b.self_samples), (70, 70));
    let callers: Vec<(&str, u64)> = b
        .callers
        .iter()
        .map(|s| (s.symbol.as_str(), s.samples))
        .collect();
    assert_eq!(callers, vec![("a", 40), ("c", 30)]);
    assert!(b.callees.is_empty());
    let m = call_graph(&r, "main").unwrap();
    assert_eq!((m.inclusive, m.self_samples), (107, 0));
    assert_eq!(m.callers[0].symbol, "[root]");
    let callees: Vec<(&str, u64)> = m
        .callees
        .iter()
        .map(|s| (s.symbol.as_str(), s.samples))
        .collect();
    assert_eq!(
        callees,
        vec![
            ("a", 50),
            ("c", 50),
            ("libs.so+0x20", 4),
            ("libs.so+0x10", 3)
        ]
    );
    assert!(call_graph(&r, "nosuch").is_none());
    let text = render_call_graph(&b, true, true);
    assert!(text.contains("Callers of b:"), "{text}");
    assert!(text.contains("b: 70 samples inclusive"), "{text}");
    // folded: root first, depth > 1, counts kept
    let folded = r.folded();
    let f: std::collections::HashMap<&str, u64> =
        folded.iter().map(|(l, n)| (l.as_str(), *n)).collect();
    assert_eq!(f.get("app[10];main;a;b"), Some(&40));
    assert_eq!(f.get("app[10];main;c;b"), Some(&30));
    assert_eq!(f.get("app[10];main;libs.so+0x10"), Some(&3));
    assert_eq!(f.get("app[10];a"), Some(&3));
    assert_eq!(r.folded().iter().map(|x| x.1).sum::<u64>(), 110);
    let text = render_text(&r);
    assert!(text.contains("Inclusive"), "{text}");
}

#[test]
fn unresolved_addresses_are_listed_per_address() {
    let r = stack_report(FlameRoot::Process);
    let lib: Vec<(&str, u64)> = r
        .symbols
        .iter()
        .filter(|s| s.image == "/lib/libs.so")
        .map(|s| (s.symbol.as_str(), s.samples))
        .collect();
    assert_eq!(lib, vec![("libs.so+0x20", 4), ("libs.so+0x10", 3)]);
    assert!(!r.symbols.iter().any(|s| s.symbol == UNKNOWN_SYMBOL));
}

#[test]
fn flame_roots() {
    let none = stack_report(FlameRoot::None);
    assert!(none
        .folded()
        .iter()
        .any(|(l, n)| l == "main;a;b" && *n == 40));
    let comp = stack_report(FlameRoot::Component);
    assert!(comp.folded().iter().all(|(l, _)| l.starts_with("app[10];")));
    let tag = stack_report(FlameRoot::Tag);
    assert!(tag
        .folded()
        .iter()
        .all(|(l, _)| l.starts_with("(untagged);")));
}

#[test]
fn stack_values_and_callers() {
    let mut v = Vec::new();
    for a in [0x10u64, PERF_CONTEXT_MAX, 0x20, u64::MAX - 511, 0, 0x30] {
        v.extend_from_slice(&a.to_ne_bytes());
    }
    // markers left out, nothing after the first zero
    assert_eq!(stack_frames(&v), vec![0x10, 0x20]);
    assert_eq!(stack_frames(&v[..7]), Vec::<u64>::new());
    assert_eq!(callers(0x10, &[0x10, 0x11], &[0x20]), vec![0x11, 0x20]);
    assert_eq!(callers(0x10, &[], &[0x10, 0x20]), vec![0x20]);
    // a chain that does not start at the ip keeps every frame
    assert_eq!(callers(0x99, &[], &[0x10, 0x20]), vec![0x10, 0x20]);
    let mut p = Profile::default();
    assert_eq!(p.stack_id(&[]), 0);
    let f = [Frame {
        image: 0,
        offset: 1,
    }];
    assert_eq!(p.stack_id(&f), 1);
    assert_eq!(p.stack_id(&f), 1);
    assert_eq!(p.stack(1), &f);
    assert_eq!(p.stack(7), &[]);
}

#[test]
fn histogram_quantiles() {
    assert_eq!(hist_quantile(&[], 32.0, 0.99), 0.0);
    assert_eq!(hist_quantile(&[0, 0], 32.0, 0.5), 0.0);
    let mut h = vec![0u64; 10];
    h[2] = 98;
    h[7] = 2;
    assert_eq!(hist_quantile(&h, 32.0, 0.5), 96.0);
    assert_eq!(hist_quantile(&h, 32.0, 0.98), 96.0);
    assert_eq!(hist_quantile(&h, 32.0, 0.99), 256.0);
    assert_eq!(hist_quantile(&h, 32.0, 1.0), 256.0);
}

#[test]
fn short_names_and_lookup_by_them() {
    assert_eq!(
        short_name("lua_geti(lua_State*, int, long long)"),
        "lua_geti"
    );
    assert_eq!(short_name("ns::Table<int>::get(int) const"), "get");
    assert_eq!(
        short_name("llvm::AnalysisManager<llvm::Module>::run"),
        "run"
    );
    assert_eq!(short_name("std::vector<int>"), "vector");
    assert_eq!(short_name("main"), "main");
    assert_eq!(short_name("operator()(int)"), "operator()");
    struct Cpp;
    impl Symbolizer for Cpp {
        fn symbolize(&mut self, _: &Image, offsets: &[u64]) -> Vec<Option<String>> {
            offsets
                .iter()
                .map(|o| {
                    Some(match o / 0x100 {
                        0x10 => "lua_geti(lua_State*, int, long long)".into(),
                        0x11 => "a::run(int)".into(),
                        0x12 => "b::run(int)".into(),
                        _ => "main".into(),
                    })
                })
                .collect()
        }
    }
    let mut p = Profile::with_images(vec![Image::named("/bin/lua", ImageKind::Elf)]);
    for (leaf, n) in [(0x1010u64, 5u64), (0x1110, 3), (0x1210, 2)] {
        let stack = p.stack_id(&[Frame {
            image: 0,
            offset: 0x2001,
        }]);
        p.add_row(
            RowKey {
                pid: 1,
                tid: 1,
                cpu: 0,
                mode: Mode::User,
                image: 0,
                offset: leaf,
                tags: vec![0; 1],
                stack,
                cgroup: 0,
            },
            n,
        )
        .unwrap();
    }
    let r = build_report(
        &p,
        &std::collections::HashMap::new(),
        &[],
        &Meta::default(),
        &mut Cpp,
        &ReportOpts::default(),
    );
    // before: only the full signature matched, and nothing said why
    assert!(call_graph(&r, "lua_geti").is_none());
    let g = find_call_graph(&r, "lua_geti").unwrap();
    assert_eq!((g.inclusive, g.self_samples), (5, 5));
    assert_eq!(g.symbol, "lua_geti(lua_State*, int, long long)");
    assert_eq!(
        find_call_graph(&r, "run").unwrap_err(),
        Lookup::Ambiguous(vec!["a::run(int)".into(), "b::run(int)".into()])
    );
    assert_eq!(find_call_graph(&r, "a::run(int)").unwrap().inclusive, 3);
    assert_eq!(find_call_graph(&r, "nosuch").unwrap_err(), Lookup::NotFound);
}

/// `--callers` and annotate find a function by an alias: glibc's other
/// names at its address (`__read` for `read`), the IFUNC an implementation
/// serves (`memcpy` for `__memcpy_avx_unaligned_erms`).
#[test]
fn lookup_by_alias() {
    struct Libc;
    impl Symbolizer for Libc {
        fn symbolize(&mut self, i: &Image, offsets: &[u64]) -> Vec<Option<String>> {
            self.locate(i, offsets)
                .into_iter()
                .map(|s| s.map(|s| s.name))
                .collect()
        }
        fn locate(&mut self, _: &Image, offsets: &[u64]) -> Vec<Option<SymInfo>> {
            offsets
                .iter()
                .map(|o| {
                    let (name, aliases): (&str, &[&str]) = match o / 0x100 {
                        0x10 => ("read", &["__GI___libc_read", "__libc_read", "__read"]),
                        0x11 => ("__memcpy_avx_unaligned_erms", &["memcpy"]),
                        _ => ("main", &[]),
                    };
                    Some(SymInfo {
                        name: name.into(),
                        aliases: aliases.iter().map(|a| a.to_string()).collect(),
                        ..Default::default()
                    })
                })
                .collect()
        }
    }
    let mut p = Profile::with_images(vec![Image::named("/lib/libc.so.6", ImageKind::Elf)]);
    for (leaf, n) in [(0x1010u64, 5u64), (0x1110, 3)] {
        let stack = p.stack_id(&[Frame {
            image: 0,
            offset: 0x2001,
        }]);
        p.add_row(
            RowKey {
                pid: 1,
                tid: 1,
                cpu: 0,
                mode: Mode::User,
                image: 0,
                offset: leaf,
                tags: vec![0; 1],
                stack,
                cgroup: 0,
            },
            n,
        )
        .unwrap();
    }
    let r = build_report(
        &p,
        &std::collections::HashMap::new(),
        &[],
        &Meta::default(),
        &mut Libc,
        &ReportOpts::default(),
    );
    assert_eq!(r.symbols[0].symbol, "read");
    for name in ["read", "__read", "__GI___libc_read"] {
        let g = find_call_graph(&r, name).unwrap();
        assert_eq!((g.symbol.as_str(), g.self_samples), ("read", 5), "{name}");
    }
    let g = find_call_graph(&r, "memcpy").unwrap();
    assert_eq!(g.symbol, "__memcpy_avx_unaligned_erms");
    assert_eq!(g.callers[0].symbol, "main");
}
