//! kallsyms.gz: the gzip layer (with its size limit) and the text parser
//! must not panic; lookups in what they accept must not either.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::parse;

fuzz_target!(|data: &[u8]| {
    // gzip streams start with 1f 8b: feed those to the gzip layer, the
    // rest to the text parser directly (which the gzip layer ends in)
    let k = if data.starts_with(&[0x1f, 0x8b]) {
        parse::kallsyms_gz(data)
    } else {
        parse::kallsyms(data)
    };
    if let Ok(k) = k {
        for a in [0, 1, 0xffff_ffff_8100_0000, u64::MAX] {
            let _ = k.lookup(a);
        }
    }
});
