//! images.json: parse::images must not panic; what it accepts indexes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mantle_prof::model::Profile;
use mantle_prof::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok(images) = parse::images(data) {
        let n = images.len();
        let p = Profile::with_images(images);
        // no duplicates: every image keeps its own index
        assert_eq!(p.images.len(), n);
        for im in &p.images {
            let _ = im.display();
        }
    }
});
