//! The C interface: every function include/mantle/tags.h, exec.h and
//! comp.h declare is exported by libmantle.so and nothing else is, and a C
//! program that uses all three headers compiles with warnings as errors and
//! links. (include/mantle/instr.h is libmantle-instr's, tested there.)

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use mantle_testsupport::build::workspace as root;

/// The directory of the libmantle.so under test (target/<profile>).
fn lib_dir() -> PathBuf {
    mantle_testsupport::build::libmantle()
        .unwrap_or_else(|e| panic!("{e}"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// libmantle's headers.
const HEADERS: [&str; 3] = ["tags.h", "exec.h", "comp.h"];

fn declared() -> BTreeSet<String> {
    let h = HEADERS
        .iter()
        .map(|f| std::fs::read_to_string(root().join("include/mantle").join(f)).unwrap())
        .collect::<String>();
    h.lines()
        .filter(|l| !l.trim_start().starts_with('*') && !l.trim_start().starts_with("/*"))
        .filter_map(|l| {
            let i = l.find("mantle_")?;
            let rest = &l[i..];
            let end = rest.find('(')?;
            let name = &rest[..end];
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
                .then(|| name.to_string())
        })
        .collect()
}

#[test]
fn header_matches_exports() {
    let lib = mantle_testsupport::build::libmantle().unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils)");
    assert!(out.status.success());
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("mantle_"))
        .map(String::from)
        .collect();
    let declared = declared();
    assert!(
        declared.len() >= 14,
        "parsed too few declarations: {declared:?}"
    );
    assert_eq!(
        declared, exported,
        "tags.h + exec.h + comp.h declarations vs libmantle.so exports"
    );
}

#[test]
fn c_program_compiles_and_links() {
    let dir = std::env::temp_dir().join(format!("mantle-capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("use_all.c");
    let calls: String = declared()
        .iter()
        .map(|f| format!("    (void)&{f};\n"))
        .collect();
    std::fs::write(
        &src,
        format!(
            "#include <mantle/tags.h>\n#include <mantle/exec.h>\n#include <mantle/comp.h>\n#include <stdio.h>\nint main(void) {{\n{calls}    \
             printf(\"%s\\n\", mantle_strerror(mantle_tag_lookup(\"x\") < 0 ? -19 : 0));\n    return 0;\n}}\n"
        ),
    )
    .unwrap();
    mantle_testsupport::build::run_cc(
        "a C program using all of libmantle's headers",
        Command::new("cc")
            .args([
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wstrict-prototypes",
            ])
            .arg(format!("-I{}", root().join("include").display()))
            .arg(&src)
            .arg(format!("-L{}", lib_dir().display()))
            .arg("-lmantle")
            .arg("-o")
            .arg(dir.join("use_all")),
    );
    let _ = std::fs::remove_dir_all(&dir);
}
