//! processes.json: parse::processes must not panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = parse::processes(data) {
        let mut pids: Vec<u32> = v.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        assert_eq!(pids.len(), v.len(), "duplicate pids accepted");
    }
});
