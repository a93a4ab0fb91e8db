//! jit/perf-PID.map: parse::jit_map must not panic; lookups in what it
//! accepts must not either (start + size overflowed once); the recorder's
//! cleaning keeps exactly the lines the parser accepts.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::parse;
use mantle_prof::symbols::JitMap;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = parse::jit_map(data) {
        for a in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            let _ = m.lookup(a);
        }
    }
    let (clean, _) = JitMap::clean(&String::from_utf8_lossy(data));
    parse::jit_map(clean.as_bytes()).expect("cleaned map does not parse");
});
