//! The cluster table (`mantle tags up --cluster FILE`): any text either
//! is refused with an error or gives a table whose tags are valid, unique
//! and at most 16, one per non-comment line, and which written out and
//! parsed again is equal, digest included (the digest is what machines
//! compare, so it must not depend on comments or spacing).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mantle_tags::model::parse_cluster;
use mantle_tags_fuzz::{check_cluster, check_cluster_round_trip};

fuzz_target!(|data: &[u8]| {
    // The CLI reads the file with read_to_string: non-UTF-8 is refused
    // before parsing.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_cluster(text) {
        Ok(t) => {
            check_cluster(&t, text);
            check_cluster_round_trip(&t);
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
