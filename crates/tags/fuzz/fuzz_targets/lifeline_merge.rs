//! The merge of lifelines from several machines, on structured input:
//! several parts whose records collide on clocks, hosts, sequence numbers
//! and tags far more often than random JSON would, with strings that are
//! sometimes anything at all. Checks the documented order, that exactly
//! the repeated receptions are dropped, that the result does not depend
//! on the order of the files or on merging again, and the renderings.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mantle_tags::lifeline::{chrome_trace, merge, svg};
use mantle_tags::ReceptionInfo;
use mantle_tags_fuzz::{check_chrome, check_json_round_trip, check_merge, check_svg, Rec};

fuzz_target!(|input: (Vec<Vec<Rec>>, Vec<(u8, u8, u8)>)| {
    let (parts, copies) = input;
    let mut parts: Vec<Vec<ReceptionInfo>> = parts
        .iter()
        .map(|p| p.iter().map(Rec::info).collect())
        .collect();
    // The same record in two files, as when lifelines overlap: record i
    // of part `from` copied into part `to`.
    let n = parts.len();
    for (from, i, to) in copies {
        let src = &parts[from as usize % n.max(1)..];
        let Some(r) = src.first().and_then(|p| p.get(i as usize % p.len().max(1))) else {
            continue;
        };
        let r = r.clone();
        parts[to as usize % n].push(r);
    }
    let m = merge(parts.clone());
    check_merge(&parts, &m);
    check_json_round_trip(&m);
    check_svg(&svg(&m, "lifeline"), m.len());
    check_chrome(&chrome_trace(&m), &m);
});
