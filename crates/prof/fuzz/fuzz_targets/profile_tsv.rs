//! profile.tsv, the sample file, and what the report does with it: the
//! first byte chooses how many images images.json had (kinds in turn),
//! the rest is the file. An accepted profile must build a report (with a
//! symbolizer that names nothing), render as text and pprof, and keep its
//! total.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::model::{self, Image, ImageKind, Meta, ReportOpts, Symbolizer};
use mantle_prof::parse;

struct NoSymbols;
impl Symbolizer for NoSymbols {
    fn symbolize(&mut self, _: &Image, offsets: &[u64]) -> Vec<Option<String>> {
        vec![None; offsets.len()]
    }
}

const KINDS: [ImageKind; 6] = [
    ImageKind::Elf,
    ImageKind::Kernel,
    ImageKind::Vdso,
    ImageKind::Anon,
    ImageKind::Jit,
    ImageKind::Unknown,
];

fuzz_target!(|data: &[u8]| {
    let Some((&n, file)) = data.split_first() else {
        return;
    };
    let images: Vec<Image> = (0..n as usize)
        .map(|i| Image {
            path: format!("/i{i}"),
            kind: KINDS[i % KINDS.len()],
            build_id: None,
            pid: (KINDS[i % KINDS.len()] == ImageKind::Jit).then_some(i as u32),
        })
        .collect();
    let Ok(p) = parse::profile(file, images, vec![], mantle_prof::abi::MT_WORDS) else {
        return;
    };
    let sum = p
        .counts()
        .values()
        .try_fold(0u64, |a, &c| a.checked_add(c))
        .expect("accepted counts overflow");
    assert_eq!(sum, p.total());
    for by_tag in [false, true] {
        let r = model::build_report(
            &p,
            &Default::default(),
            &[],
            &Meta::default(),
            &mut NoSymbols,
            &ReportOpts {
                by_tag,
                ..Default::default()
            },
        );
        assert_eq!(r.total, p.total());
        let _ = model::render_text(&r);
        let _ = mantle_prof::pprof::build(&r);
    }
});
