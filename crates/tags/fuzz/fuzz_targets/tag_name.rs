//! Tag names: `mantle tag create NAME`, every cluster table line, the
//! library's create. validate_name must accept exactly the documented
//! names, and an accepted name must survive the places it is stored: the
//! table's NUL-padded field (read back with abi::cstr) and a cluster table.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mantle_tags::abi::{cstr, MT_NAME_LEN};
use mantle_tags::model::{parse_cluster, validate_name, NameError};
use mantle_tags_fuzz::name_ok;

fuzz_target!(|data: &[u8]| {
    // Arguments reach the CLI as OS strings; clap refuses non-UTF-8 ones,
    // a lossy reading stands for any other caller.
    let s = String::from_utf8_lossy(data);
    let r = validate_name(&s);
    assert_eq!(r.is_ok(), name_ok(&s), "validate_name({s:?}) = {r:?}");
    match r {
        Ok(()) => {
            let mut field = [0u8; MT_NAME_LEN];
            field[..s.len()].copy_from_slice(s.as_bytes());
            assert_eq!(cstr(&field), s, "table field round trip");
            let t = parse_cluster(&s).expect("a valid name is a valid table line");
            assert_eq!(t.tags.len(), 1);
            assert_eq!(t.tags[0].name, s);
        }
        Err(e) => {
            // The error is the right one, and its message quotes the name
            // intact (it is shown to users).
            match &e {
                NameError::Empty => assert!(s.is_empty()),
                NameError::TooLong(n) => {
                    assert!(s.len() > MT_NAME_LEN - 1);
                    assert_eq!(n, &*s);
                }
                NameError::BadChar(n) => assert_eq!(n, &*s),
            }
            let _ = e.to_string();
        }
    }
});
