//! Durations: `tag create --expire` and `tag deadlock-guard --timeout`
//! (500ms, 2s, 1m, or plain milliseconds; 1 ms to 24 h). parse_duration_ms
//! must agree with that syntax, stay in range, and read its own printing
//! back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mantle_tags::model::parse_duration_ms;
use mantle_tags_fuzz::decimal;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let r = parse_duration_ms(s);
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1u128)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000)
    } else {
        (s, 1)
    };
    let expect = decimal(num)
        .map(|n| n.saturating_mul(scale))
        .filter(|ms| (1..=86_400_000).contains(ms))
        .map(|ms| ms as u32);
    assert_eq!(r.clone().ok(), expect, "parse_duration_ms({s:?}) = {r:?}");
    if let Ok(ms) = r {
        assert_eq!(parse_duration_ms(&format!("{ms}ms")), Ok(ms));
        assert_eq!(parse_duration_ms(&ms.to_string()), Ok(ms));
    }
});
