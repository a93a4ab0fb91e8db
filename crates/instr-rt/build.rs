//! Exports the trampolines' TLS pointer from the shared library (see
//! export.map).
fn main() {
    let map =
        std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("export.map");
    println!("cargo:rerun-if-changed={}", map.display());
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}
