//! stacks.tsv: the stack table parser, then a profile whose rows name
//! those stacks, and the report built from both (call graphs included).
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::model::{build_report, call_graph, Image, ImageKind, Meta, ReportOpts, Symbolizer};
use mantle_prof::parse;

struct NoSym;
impl Symbolizer for NoSym {
    fn symbolize(&mut self, _: &Image, offsets: &[u64]) -> Vec<Option<String>> {
        offsets.iter().map(|o| (o % 3 == 0).then(|| format!("f{}", o % 7))).collect()
    }
}

fuzz_target!(|data: &[u8]| {
    // first byte: images (1..=4); then the table, a NUL, then profile.tsv
    let Some((&n, rest)) = data.split_first() else { return };
    let images: Vec<Image> = (0..(n % 4 + 1))
        .map(|i| Image::named(&format!("/i{i}"), ImageKind::Elf))
        .collect();
    let (table, rows) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &b""[..]),
    };
    let Ok(stacks) = parse::stacks(table, images.len()) else { return };
    assert!(stacks[0].is_empty());
    for s in &stacks {
        assert!(s.len() <= parse::STACK_MAX);
        assert!(s.iter().all(|f| (f.image as usize) < images.len()));
    }
    let Ok(p) = parse::profile(rows, images, stacks, mantle_prof::abi::MT_WORDS) else { return };
    let r = build_report(&p, &Default::default(), &[], &Meta::default(), &mut NoSym, &ReportOpts::default());
    assert_eq!(r.folded().iter().map(|f| f.1).sum::<u64>(), r.total);
    // (a row may count 0 samples: its functions are then in no call graph)
    for s in r.inclusive.iter().filter(|s| s.samples > 0).take(3) {
        let g = call_graph(&r, &s.symbol).expect("an inclusive symbol is in some stack");
        assert_eq!(g.callers.iter().map(|c| c.samples).sum::<u64>(), g.inclusive);
    }
});
