//! TTLs: `--ttl N|inf` of `tag create`, `tag set`, `tag run`, and `ttl=`
//! in cluster tables. parse_ttl must agree with the documented syntax (a
//! hop count 0..=254, or inf), and a TTL printed back parses to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mantle_tags::model::parse_ttl;
use mantle_tags_fuzz::decimal;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let r = parse_ttl(s);
    let expect = if s == "inf" || s == "infinite" {
        Some(255u8)
    } else {
        decimal(s).filter(|&n| n <= 254).map(|n| n as u8)
    };
    assert_eq!(r.clone().ok(), expect, "parse_ttl({s:?}) = {r:?}");
    if let Ok(n) = r {
        let text = if n == 255 {
            "inf".to_string()
        } else {
            n.to_string()
        };
        assert_eq!(parse_ttl(&text), Ok(n), "printed TTL {text:?}");
        // the same value in a cluster table line
        let t = mantle_tags::model::parse_cluster(&format!("x ttl={s}"))
            .expect("a valid TTL is a valid attribute");
        assert_eq!(t.tags[0].ttl, (n != 255).then_some(n));
    }
});
