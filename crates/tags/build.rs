//! Builds the tags eBPF object and its libbpf-rs skeleton (crates/bpf-build
//! chooses the architecture, the vmlinux.h and the clang arguments), and
//! turns the constants user space needs from tags.h into `consts.rs`.
use mantle_bpf_build::{mt_tags_override, Bpf, Defines};

fn main() {
    Bpf::new("src/bpf/tags.bpf.c").include("src/bpf").build();

    // The shared constants come from the one header both halves use.
    let header = Defines::read("src/bpf/tags.h");
    let mt_tags = mt_tags_override().unwrap_or_else(|| header.require("MT_TAGS"));
    let mut consts = format!(
        "/// Bits in a tag vector (tags.h MT_TAGS).\npub const MT_TAGS: usize = {mt_tags};\n"
    );
    for name in [
        "MT_NAME_LEN",
        "MT_TTL_INF",
        "MT_LIFELINE_SLOTS",
        "MT_COMM_LEN",
        "MT_GLOBAL_BITS",
    ] {
        consts += &format!(
            "/// tags.h {name}\npub const {name}: usize = {};\n",
            header.require(name)
        );
    }
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    std::fs::write(out.join("consts.rs"), consts).expect("write consts.rs");
}
