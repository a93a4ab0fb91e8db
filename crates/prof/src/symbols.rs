//! Symbols for the report: ELF symbol tables and DWARF through blazesym
//! (file offsets in, names out), the kernel through the session's kallsyms
//! snapshot, the vDSO through the session's copy of it, JIT code through the
//! /tmp/perf-PID.map files captured while recording. A file whose build ID
//! differs from the one recorded is reported and not symbolized (its
//! symbols would be someone else's).

use crate::model::{Image, ImageKind, Kallsyms, Symbolizer};
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Lower-case hex build ID of an ELF file, if it has one.
pub fn build_id(path: &Path) -> Option<String> {
    let id = blazesym::helper::read_elf_build_id(path).ok()??;
    Some(hex(&id))
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A JIT map: sorted (start, size, name).
#[derive(Debug, Default, Clone)]
pub struct JitMap(Vec<(u64, u64, String)>);

impl JitMap {
    /// Parses perf's "START SIZE name" lines (hex, without 0x or with).
    pub fn parse(text: &str) -> JitMap {
        let mut v: Vec<(u64, u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(3, ' ');
                let p = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
                let a = p(f.next()?)?;
                let n = p(f.next()?)?;
                Some((a, n, f.next()?.trim().to_string()))
            })
            .collect();
        v.sort();
        JitMap(v)
    }
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.0.partition_point(|(a, _, _)| *a <= addr);
        let (a, n, name) = self.0.get(i.checked_sub(1)?)?;
        (addr < a + n.max(&1)).then_some(name.as_str())
    }
}

/// The report's symbolizer over a session directory.
pub struct SessionSymbolizer {
    sym: blazesym::symbolize::Symbolizer,
    kallsyms: Kallsyms,
    dir: PathBuf,
    jit: HashMap<u32, JitMap>,
    checked: HashMap<Image, bool>,
    /// Images that could not be symbolized, and why.
    pub warnings: Vec<String>,
}

impl SessionSymbolizer {
    pub fn new(dir: &Path, kallsyms: Kallsyms) -> Self {
        SessionSymbolizer {
            sym: blazesym::symbolize::Symbolizer::new(),
            kallsyms,
            dir: dir.to_path_buf(),
            jit: HashMap::new(),
            checked: HashMap::new(),
            warnings: Vec::new(),
        }
    }

    /// Whether the file on disk is the one that was profiled.
    fn usable(&mut self, image: &Image) -> bool {
        if let Some(&ok) = self.checked.get(image) {
            return ok;
        }
        let path = Path::new(&image.path);
        let ok = if !path.exists() {
            self.warnings.push(format!(
                "{}: file gone since recording: not symbolized",
                image.path
            ));
            false
        } else {
            match (&image.build_id, build_id(path)) {
                (Some(rec), Some(now)) if *rec != now => {
                    self.warnings.push(format!(
                        "{}: replaced on disk since recording (build ID {rec} then, {now} now): not symbolized",
                        image.path
                    ));
                    false
                }
                (Some(rec), None) => {
                    self.warnings.push(format!(
                        "{}: replaced on disk since recording (build ID {rec} then, none now): not symbolized",
                        image.path
                    ));
                    false
                }
                _ => true,
            }
        };
        self.checked.insert(image.clone(), ok);
        ok
    }

    fn elf(&self, path: &Path, offsets: &[u64]) -> Vec<Option<String>> {
        let src = Source::Elf(Elf::new(path));
        match self.sym.symbolize(&src, Input::FileOffset(offsets)) {
            Ok(v) => v
                .into_iter()
                .map(|s| match s {
                    Symbolized::Sym(s) => Some(s.name.into_owned()),
                    Symbolized::Unknown(_) => None,
                })
                .collect(),
            Err(_) => vec![None; offsets.len()],
        }
    }
}

impl Symbolizer for SessionSymbolizer {
    fn symbolize(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<String>> {
        match image.kind {
            ImageKind::Kernel => offsets
                .iter()
                .map(|o| self.kallsyms.lookup(*o).map(str::to_string))
                .collect(),
            ImageKind::Elf => {
                if self.usable(image) {
                    self.elf(Path::new(&image.path), offsets)
                } else {
                    vec![None; offsets.len()]
                }
            }
            ImageKind::Vdso => {
                let p = self.dir.join("vdso.so");
                if p.exists() {
                    self.elf(&p, offsets)
                } else {
                    vec![None; offsets.len()]
                }
            }
            ImageKind::Jit => {
                let pid = image.pid.unwrap_or(0);
                let dir = self.dir.clone();
                let m = self.jit.entry(pid).or_insert_with(|| {
                    JitMap::parse(
                        &std::fs::read_to_string(dir.join(format!("jit/perf-{pid}.map")))
                            .unwrap_or_default(),
                    )
                });
                offsets
                    .iter()
                    .map(|o| m.lookup(*o).map(str::to_string))
                    .collect()
            }
            ImageKind::Anon | ImageKind::Unknown => vec![None; offsets.len()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn jit_map() {
        let m = JitMap::parse("1000 10 foo\n0x2000 0x20 bar baz\nbad line\n");
        assert_eq!(m.lookup(0x1005), Some("foo"));
        assert_eq!(m.lookup(0x1010), None);
        assert_eq!(m.lookup(0x201f), Some("bar baz"));
        assert_eq!(m.lookup(0x10), None);
    }
}
