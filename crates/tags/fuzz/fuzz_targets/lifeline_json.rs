//! Saved lifelines (`mantle tag lifeline NAME --merge FILE...`): the file
//! is parsed by the function `--merge` uses (`lifeline_file::parse`,
//! keeping the records of one tag), merged (as one file, and split in two as if
//! from two machines), and rendered in every format. Any
//! file is refused or gives: a merge as documented, a JSON that reads back
//! equal, a well-formed SVG with one mark per reception, and a Chrome trace
//! whose flows pair up.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mantle_tags::lifeline::{chrome_trace, merge, svg};
use mantle_tags::ReceptionInfo;
use mantle_tags_fuzz::{check_chrome, check_json_round_trip, check_merge, check_svg};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(l) = mantle_tags::lifeline_file::parse("fuzz input", text) else {
        return;
    };
    let Some(name) = l.first().map(|r| r.tag.clone()) else {
        return;
    };
    let l: Vec<ReceptionInfo> = l.into_iter().filter(|r| r.tag == name).collect();
    // As one file, and as two (split where the file's first sequence
    // number says), as when several machines' files are merged.
    let cut = l[0].seq as usize % (l.len() + 1);
    let one = vec![l.clone()];
    let two = vec![l[..cut].to_vec(), l[cut..].to_vec()];
    for parts in [one, two] {
        let m = merge(parts.clone());
        check_merge(&parts, &m);
        check_json_round_trip(&m);
        check_svg(&svg(&m, &format!("lifeline of tag {name}")), m.len());
        check_chrome(&chrome_trace(&m), &m);
    }
});
