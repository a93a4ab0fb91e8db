//! tags.json: parse::tags must not panic; accepted bits are in range.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = parse::tags(data) {
        assert!(v
            .iter()
            .all(|t| (t.bit as usize) < mantle_prof::abi::MT_TAGS));
    }
});
