//! vdso.so (and, through the same symbolizer, any ELF image the report
//! opens): parse::elf_image must not panic, and an image it accepts must
//! go through blazesym (symbols, build ID) without a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::parse;

fuzz_target!(|data: &[u8]| {
    if data.len() as u64 > parse::VDSO_MAX || parse::elf_image(data).is_err() {
        return;
    }
    let offsets = [0, 0x40, 0x400, 0x1000, 0x1234, u64::MAX];
    // (under libFuzzer a panic aborts before the library's guard sees it,
    // so blazesym panics are findings here)
    if let Ok(Ok((_, names))) = mantle_prof::symbols::elf_bytes_info(data, &offsets) {
        assert_eq!(names.len(), offsets.len());
    }
});
