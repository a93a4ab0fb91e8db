//! Symbol resolution against ELF fixtures built from C source here (cc):
//! the fixture prints its functions' addresses and its own executable
//! mappings; the pure core turns them into (image, file offset) and the
//! session symbolizer (blazesym) must name them — from the ELF symbol table,
//! from DWARF alone (symbol table removed), and not at all when the file
//! was replaced after "recording" (build ID mismatch).

use mantle_prof::model::{parse_maps_line, AddressSpaces, Kallsyms, Mode, Symbolizer};
use mantle_prof::symbols::{build_id, SessionSymbolizer};
use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURE: &str = r#"
#include <stdio.h>
__attribute__((noinline)) static int alpha_static(int x) { return x * 3 + 1; }
__attribute__((noinline)) int beta_global(int x) { return alpha_static(x) ^ 5; }
int main(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    printf("alpha_static %p\nbeta_global %p\nmain %p\n",
           (void *)alpha_static, (void *)beta_global, (void *)main);
    while (fgets(line, sizeof line, f)) printf("MAP %s", line);
    return beta_global(1) == 0;
}
"#;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mantle-prof-sym-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cc(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join("fixture.c");
    std::fs::write(&src, FIXTURE).unwrap();
    let out = dir.join(name);
    mantle_testsupport::build::run_cc(
        "an ELF fixture",
        Command::new("cc")
            .args(["-O1", "-g", "-o"])
            .arg(&out)
            .arg(&src)
            .args(extra),
    );
    out
}

/// Runs the fixture; returns (function, resolved image path, file offset).
fn run_and_resolve(bin: &Path) -> Vec<(String, String, u64)> {
    let out = Command::new(bin).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut sp = AddressSpaces::new(vec![]);
    sp.add_process(1, 0, "fixture");
    for l in text.lines().filter_map(|l| l.strip_prefix("MAP ")) {
        if let Some(m) = parse_maps_line(l) {
            sp.mmap(1, m);
        }
    }
    text.lines()
        .filter(|l| !l.starts_with("MAP "))
        .map(|l| {
            let (name, addr) = l.split_once(' ').unwrap();
            let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap();
            let r = sp.resolve(1, addr, Mode::User);
            (name.to_string(), r.image.path, r.offset)
        })
        .collect()
}

fn symbolize(
    bin: &Path,
    offsets: &[u64],
    recorded_id: Option<String>,
) -> (Vec<Option<String>>, Vec<String>) {
    let mut s = SessionSymbolizer::new(Kallsyms::default());
    let img = mantle_prof::model::Image {
        path: bin.display().to_string(),
        kind: mantle_prof::model::ImageKind::Elf,
        build_id: recorded_id,
        pid: None,
    };
    let names = s.symbolize(&img, offsets);
    (names, s.warnings)
}

#[test]
fn elf_symtab_names_functions_at_file_offsets() {
    let d = tmpdir("symtab");
    let bin = cc(&d, "fx", &[]);
    let r = run_and_resolve(&bin);
    assert_eq!(r.len(), 3);
    for (_, img, _) in &r {
        assert_eq!(Path::new(img), bin.canonicalize().unwrap());
    }
    let offs: Vec<u64> = r.iter().map(|x| x.2).collect();
    let (names, warn) = symbolize(&bin, &offs, build_id(&bin));
    assert!(warn.is_empty(), "{warn:?}");
    for ((want, _, _), got) in r.iter().zip(names) {
        assert_eq!(got.as_deref(), Some(want.as_str()));
    }
    // an address inside a function resolves to it too
    let (n, _) = symbolize(&bin, &[offs[1] + 1], None);
    assert_eq!(n[0].as_deref(), Some("beta_global"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn dwarf_names_functions_without_a_symbol_table() {
    let d = tmpdir("dwarf");
    let bin = cc(&d, "fx", &[]);
    let r = run_and_resolve(&bin);
    let st = Command::new("objcopy")
        .args(["--remove-section", ".symtab", "--remove-section", ".strtab"])
        .arg(&bin)
        .status()
        .expect("objcopy (binutils)");
    assert!(st.success());
    let offs: Vec<u64> = r.iter().map(|x| x.2).collect();
    let (names, _) = symbolize(&bin, &offs, None);
    // alpha_static is in neither .dynsym nor anywhere but DWARF now
    assert_eq!(names[0].as_deref(), Some("alpha_static"));
    assert_eq!(names[1].as_deref(), Some("beta_global"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn replaced_file_is_detected_by_build_id() {
    let d = tmpdir("replaced");
    let bin = cc(&d, "fx", &[]);
    let r = run_and_resolve(&bin);
    let recorded = build_id(&bin).expect("cc adds a build ID");
    // "after recording": the file is rebuilt from other source
    std::fs::write(d.join("other.c"), "int main(void){return 42;}\n").unwrap();
    mantle_testsupport::build::run_cc(
        "other.c",
        Command::new("cc")
            .arg("-o")
            .arg(&bin)
            .arg(d.join("other.c")),
    );
    assert_ne!(build_id(&bin).as_deref(), Some(recorded.as_str()));
    let offs: Vec<u64> = r.iter().map(|x| x.2).collect();
    let (names, warn) = symbolize(&bin, &offs, Some(recorded));
    assert!(names.iter().all(|n| n.is_none()));
    assert_eq!(warn.len(), 1);
    assert!(
        warn[0].contains("replaced on disk since recording"),
        "{}",
        warn[0]
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// An image whose .gnu_debuglink names a file beside it that is a FIFO:
/// blazesym, reading DWARF, would open the FIFO and wait forever. The
/// report must finish, say why, and still name the functions from the
/// ELF symbol table.
#[test]
fn debug_link_to_a_fifo_is_not_followed() {
    let d = tmpdir("debuglink");
    let bin = cc(&d, "fx", &[]);
    let r = run_and_resolve(&bin);
    let dbg = d.join("fx.debug");
    std::fs::write(&dbg, b"placeholder").unwrap();
    let st = Command::new("objcopy")
        .arg(format!("--add-gnu-debuglink={}", dbg.display()))
        .arg(&bin)
        .status()
        .expect("objcopy (binutils)");
    assert!(st.success());
    std::fs::remove_file(&dbg).unwrap();
    let st = Command::new("mkfifo").arg(&dbg).status().unwrap();
    assert!(st.success());
    let offs: Vec<u64> = r.iter().map(|x| x.2).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let b = bin.clone();
    std::thread::spawn(move || {
        let _ = tx.send(symbolize(&b, &offs, None));
    });
    let (names, warn) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("symbolization blocked for 20 s (opened the FIFO?)");
    assert_eq!(names[1].as_deref(), Some("beta_global"));
    assert!(
        warn.iter()
            .any(|w| w.contains("fx.debug") && w.contains("not a regular file")),
        "{warn:?}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// glibc names `read` four ways at one address (`read`, `__read`,
/// `__libc_read` and, in its debug file, `__GI___libc_read`): the report
/// names it `read`, as perf does, with the others as aliases; an IFUNC
/// implementation (`__memcpy_avx_unaligned_erms`, a local symbol of the
/// debug file) keeps its name and has the IFUNC `memcpy` as an alias.
#[test]
fn glibc_aliases_get_the_public_name() {
    use mantle_prof::debugfile::{find, Segments, DEFAULT_DEBUG_DIRS};
    use mantle_prof::elfsyms::ElfSyms;
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6")
        .canonicalize()
        .expect("glibc at /lib/x86_64-linux-gnu/libc.so.6");
    let f = std::fs::File::open(&libc).unwrap();
    let (syms, segs) = (ElfSyms::read(&f), Segments::read(&f));
    let id = build_id(&libc).expect("glibc has a build ID");
    let dirs: Vec<PathBuf> = DEFAULT_DEBUG_DIRS.iter().map(PathBuf::from).collect();
    let dbg = find(&id, &dirs);
    mantle_testsupport::require(
        "glibc's debug file (libc6-dbg; scripts/setup.sh installs it)",
        dbg.is_some(),
        "for glibc's local symbols",
    );
    let dsyms = ElfSyms::read(&dbg.unwrap().0);
    let img = mantle_prof::model::Image {
        path: libc.display().to_string(),
        kind: mantle_prof::model::ImageKind::Elf,
        build_id: Some(id),
        pid: None,
    };
    let read = syms.find("__read").expect("__read in .dynsym").addr;
    let memcpy = dsyms
        .find("__memcpy_avx_unaligned_erms")
        .expect("__memcpy_avx_unaligned_erms in the debug file")
        .addr;
    let offs = [
        segs.offset(read + 4).unwrap(),
        segs.offset(memcpy + 4).unwrap(),
    ];
    let mut s = SessionSymbolizer::new(Kallsyms::default());
    let v = s.locate(&img, &offs);
    let r = v[0].as_ref().expect("read found");
    assert_eq!(r.name, "read", "{r:?}");
    for a in ["__read", "__libc_read", "__GI___libc_read"] {
        assert!(
            r.aliases.iter().any(|x| x == a),
            "{a} not in {:?}",
            r.aliases
        );
    }
    let m = v[1].as_ref().expect("memcpy's implementation found");
    assert_eq!(m.name, "__memcpy_avx_unaligned_erms");
    assert!(m.aliases.iter().any(|x| x == "memcpy"), "{:?}", m.aliases);
    // and the debug file's DWARF gives its source line
    assert!(
        r.file.as_deref().is_some_and(|f| f.ends_with(".c")) && r.line > 0,
        "{r:?}"
    );
}

/// A program without a build ID whose debug info was split off with
/// objcopy --only-keep-debug and linked back with --add-gnu-debuglink:
/// its debug file is found in `.debug/` beside it (issue 33: it was not)
/// and under a debug directory at the program's own path
/// (`DIR/<program's directory>/NAME`), checked by the link's CRC; it
/// gives the stripped program's names and source lines.
#[test]
fn gnu_debuglink_in_dot_debug_and_debug_dirs() {
    let d = tmpdir("debuglink");
    let bin = cc(&d, "fx", &["-Wl,--build-id=none"]);
    assert_eq!(build_id(&bin), None);
    let r = run_and_resolve(&bin);
    let run = |args: &[&std::ffi::OsStr]| {
        let st = Command::new("objcopy")
            .args(args)
            .status()
            .expect("objcopy");
        assert!(st.success(), "objcopy {args:?}");
    };
    let dbg = d.join("fx.debug");
    run(&[
        "--only-keep-debug".as_ref(),
        bin.as_os_str(),
        dbg.as_os_str(),
    ]);
    run(&["--strip-all".as_ref(), bin.as_os_str()]);
    let link = format!("--add-gnu-debuglink={}", dbg.display());
    run(&[link.as_ref(), bin.as_os_str()]);
    let offs: Vec<u64> = r.iter().map(|x| x.2).collect();
    let img = mantle_prof::model::Image {
        path: bin.canonicalize().unwrap().display().to_string(),
        kind: mantle_prof::model::ImageKind::Elf,
        build_id: None,
        pid: None,
    };
    let locate = |dirs: Vec<PathBuf>| {
        let mut s = SessionSymbolizer::new(Kallsyms::default()).with_debug_dirs(dirs);
        let v = s.locate(&img, &offs);
        (v, s.debug_files)
    };
    // nowhere it is looked for: the stripped program has no names
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::rename(&dbg, elsewhere.join("fx.debug")).unwrap();
    let (v, _) = locate(vec![]);
    assert!(
        v.iter()
            .all(|s| s.as_ref().is_none_or(|s| !s.name.contains("alpha"))),
        "{v:?}"
    );
    // in .debug/ beside the program
    std::fs::create_dir_all(d.join(".debug")).unwrap();
    std::fs::rename(elsewhere.join("fx.debug"), d.join(".debug/fx.debug")).unwrap();
    let check = |(v, found): (
        Vec<Option<mantle_prof::model::SymInfo>>,
        Vec<(String, PathBuf)>,
    ),
                 want: &Path| {
        for ((name, _, _), s) in r.iter().zip(&v) {
            let s = s.as_ref().unwrap_or_else(|| panic!("{name}: {v:?}"));
            assert_eq!(&s.name, name);
            assert!(
                s.file.as_deref().is_some_and(|f| f.ends_with("fixture.c")) && s.line > 0,
                "{s:?}"
            );
        }
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1, want);
    };
    check(locate(vec![]), &d.join(".debug/fx.debug"));
    // under a debug directory, at the program's own directory
    let root = d.join("root");
    let real = d.canonicalize().unwrap();
    let under = root.join(real.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&under).unwrap();
    std::fs::rename(d.join(".debug/fx.debug"), under.join("fx.debug")).unwrap();
    check(locate(vec![root.clone()]), &under.join("fx.debug"));
    // a debug file of other contents (the CRC differs) is not taken
    let other = cc(&elsewhere, "other", &["-Wl,--build-id=none", "-DOTHER"]);
    std::fs::copy(&other, under.join("fx.debug")).unwrap();
    let (v, found) = locate(vec![root]);
    assert!(found.is_empty(), "{found:?}");
    assert!(
        v.iter()
            .all(|s| s.as_ref().is_none_or(|s| !s.name.contains("alpha"))),
        "{v:?}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Unnamed code in a stripped library groups per function, not per
/// address (issue 33): every address of hidden_one (a static function
/// that `strip` leaves nameless) gets one name, `[libstrip.so+0xA..0xB
/// after SYM]`, whose range holds the function, and hidden_two another.
#[test]
fn stripped_code_groups_per_function() {
    use mantle_prof::debugfile::Segments;
    use mantle_prof::elfsyms::ElfSyms;
    let d = tmpdir("stripped");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/prof/striplib.c");
    let build = |out: &Path, strip: bool| {
        let mut c = Command::new("cc");
        c.args(["-O1", "-fno-inline", "-shared", "-fPIC", "-o"])
            .arg(out)
            .arg(&src);
        if strip {
            c.arg("-s");
        }
        mantle_testsupport::build::run_cc("bench/prof/striplib.c", &mut c);
    };
    let (full, lib) = (d.join("full.so"), d.join("libstrip.so"));
    build(&full, false);
    build(&lib, true);
    let f = std::fs::File::open(&full).unwrap();
    let (syms, segs) = (ElfSyms::read(&f), Segments::read(&f));
    let mut offs = Vec::new();
    let mut ranges = Vec::new();
    for name in ["hidden_one", "hidden_two"] {
        let s = syms
            .find(name)
            .unwrap_or_else(|| panic!("{name} in the unstripped build"));
        let start = segs.offset(s.addr).unwrap();
        ranges.push((start, start + s.size));
        // its first, middle and last bytes
        offs.extend([start, start + s.size / 2, start + s.size - 1]);
    }
    let img = mantle_prof::model::Image {
        path: lib.display().to_string(),
        kind: mantle_prof::model::ImageKind::Elf,
        build_id: build_id(&lib),
        pid: None,
    };
    let mut s = SessionSymbolizer::new(Kallsyms::default()).with_debug_dirs(vec![]);
    let v: Vec<_> = s
        .locate(&img, &offs)
        .into_iter()
        .map(|s| s.expect("a group"))
        .collect();
    for (i, (lo, hi)) in ranges.into_iter().enumerate() {
        let g = &v[i * 3..i * 3 + 3];
        assert!(g.iter().all(|s| s.name == g[0].name), "{g:?}");
        assert!(g[0].name.starts_with("[libstrip.so+0x"), "{g:?}");
        let (a, b) = g[0].range.unwrap();
        assert!(a <= lo && hi <= b, "{:x}..{:x} not in {:?}", lo, hi, g[0]);
    }
    assert_ne!(v[0].name, v[3].name);
    std::fs::remove_dir_all(&d).unwrap();
}
