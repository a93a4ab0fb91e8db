//! meta.json: parse::meta must not panic, and what it accepts renders.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = parse::meta(data) {
        assert!(m.format >= 1 && m.format <= mantle_prof::session::FORMAT);
        // every report header and summary shows the caveats
        let _ = m.caveats();
    }
});
