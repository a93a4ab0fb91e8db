//! mappings.tsv: parse::mappings must not panic; accepted mappings are
//! non-empty ranges, and their paths survive escaping.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = parse::mappings(data) {
        for (_, m) in &v {
            assert!(m.start < m.end);
            let e = parse::escape_field(&m.path);
            assert!(!e.contains(['\t', '\n']));
            assert_eq!(parse::unescape_field(&e).as_deref(), Some(m.path.as_str()));
        }
    }
});
