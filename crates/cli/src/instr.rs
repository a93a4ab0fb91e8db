//! `mantle instr`: rewrite x86-64 objects so chosen functions call
//! libmantle-instr at entry and exit (crate mantle-instr), and compare an
//! original and a rewritten program.

use crate::exit::{exit_code, Failure, LibError, EXIT_FAILURE, EXIT_USAGE};
use clap::{Args, Subcommand};
use mantle_instr::{Report, Selection};
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum InstrCmd {
    /// Rewrite an object file, executable or shared library: chosen
    /// functions call the runtime at entry and exit. Link a rewritten
    /// object with -lmantle_instr_rt; a rewritten linked file loads
    /// libmantle_instr_rt.so itself.
    #[command(
        after_help = "Examples:\n  mantle instr rewrite a.o -o a.instr.o --all --map prog.map\n  mantle instr rewrite b.o -o b.instr.o -f 'comp_*' --map prog.map   # ids continue\n  cc a.instr.o b.instr.o -o prog -L target/release -lmantle_instr_rt\n  MANTLE_INSTR_MAP=prog.map MANTLE_INSTR_OUT=prof.json MANTLE_INSTR_TRACE=trace.json ./prog\n  mantle instr rewrite a.o -o a.instr.o --from-prof run.prof --share 80   # the hottest functions of a mantle prof session\n  mantle instr rewrite a.o -o a.instr.o --all --exit return-frames       # LOPI's exits\n  mantle instr rewrite ./prog -o prog.instr --all --map prog.map       # linked: PIE, non-PIE\n  mantle instr rewrite libfoo.so -o out/libfoo.so -f 'foo_*' --runtime /usr/local/lib/libmantle_instr_rt.so\n\nThe rewritten program reads (at its first instrumented call):\n  MANTLE_INSTR_OUT=path        per-function profile, written at exit\n  MANTLE_INSTR_TRACE=path      Chrome trace, written at exit\n  MANTLE_INSTR_TRACE_MAX=n     trace events kept per thread (default 1000000); past it, a marker\n                               event counts the dropped ones and a warning is printed at exit\n  MANTLE_INSTR_MAP=path        the map, to name functions\nWith no hooks set and neither output asked for, the built-in tracer does not run.\n\nExit codes: 0 done (refused functions are listed, not errors), 2 not an x86-64 ELF object, executable or shared library, a runtime others can write, or a malformed option, 5 no such file, 1 cannot write."
    )]
    Rewrite {
        /// The input: an object (.o), executable or shared library.
        input: PathBuf,
        /// Where to write the rewritten object.
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        sel: SelArgs,
        /// Sidecar map of ids to names: created, or appended to with ids
        /// continuing after the ones it has (one map per program).
        #[arg(long)]
        map: Option<PathBuf>,
        /// Print the report as JSON (schema mantle-instr-report/1).
        #[arg(long)]
        json: bool,
        /// Linked input only: the libmantle_instr_rt.so the rewritten file
        /// loads (a DT_NEEDED by absolute path). Default: the one beside
        /// this mantle binary.
        #[arg(long)]
        runtime: Option<PathBuf>,
    },
    /// Say what `rewrite` would do, without writing anything.
    #[command(
        after_help = "Examples:\n  mantle instr plan a.o --all\n  mantle prof record -o run.prof -- ./prog input && mantle instr plan a.o --from-prof run.prof --share 80\n  mantle instr plan a.o -f main -f 'parse_*' --json | jq '.functions[] | select(.status==\"refused\")'"
    )]
    Plan {
        /// The input: an object (.o), executable or shared library.
        input: PathBuf,
        #[command(flatten)]
        sel: SelArgs,
        /// Print the plan as JSON (schema mantle-instr-report/1).
        #[arg(long)]
        json: bool,
    },
    /// Run an original and a rewritten program with the same arguments and
    /// input; compare their output and exit status.
    #[command(
        after_help = "Examples:\n  mantle instr verify ./prog ./prog.instr -- -v input.txt\n  mantle instr verify ./bzip2 ./bzip2.instr -- -c < data.bin\n  mantle instr verify --stdin data.bin ./bzip2 ./bzip2.instr -- -c\n\nStandard input (or --stdin FILE, `-` for standard input) is read to its end and given to both programs;\nwhen it is a terminal and no --stdin is given, they get none (an empty input).\n\nExit codes: 0 same behaviour, 1 they differ, 5 a program or the input file is missing."
    )]
    Verify {
        /// The program as built.
        original: PathBuf,
        /// The program linked from rewritten objects.
        rewritten: PathBuf,
        /// A file both programs read as standard input (`-`: this
        /// command's standard input, also the default unless it is a
        /// terminal).
        #[arg(long)]
        stdin: Option<PathBuf>,
        /// Arguments given to both programs.
        #[arg(last = true)]
        args: Vec<String>,
    },
}

#[derive(Args, Debug)]
pub struct SelArgs {
    /// A function name or glob (`*`, `?`); repeatable.
    #[arg(short = 'f', long = "function")]
    functions: Vec<String>,
    /// A file of names or globs, one a line (# comments).
    #[arg(long)]
    functions_from: Option<PathBuf>,
    /// Every function of the object.
    #[arg(long)]
    all: bool,
    /// A `mantle prof` session: choose the fewest functions that make up
    /// --share percent of its samples in the program (the paper chose by
    /// gprof).
    #[arg(long, value_name = "SESSION")]
    from_prof: Option<PathBuf>,
    /// Percent of the session's samples the chosen functions make up.
    #[arg(long, default_value_t = 80.0, requires = "from_prof")]
    share: f64,
    /// Whose samples count: images whose path contains this (default: the
    /// session's main binary, the executable with the most samples).
    #[arg(long, requires = "from_prof")]
    prof_image: Option<String>,
    /// Exits: auto (a call-through trampoline; patched rets in objects
    /// using C++ exceptions), patched-rets (where every exit is a movable
    /// ret, else return frames) or return-frames (LOPI's everywhere);
    /// docs/instr.md "How it works"
    #[arg(long, value_enum, default_value = "auto")]
    exit: Exit,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Exit {
    Auto,
    PatchedRets,
    ReturnFrames,
}

impl SelArgs {
    fn mode(&self) -> mantle_instr::ExitMode {
        match self.exit {
            Exit::Auto => mantle_instr::ExitMode::Auto,
            Exit::PatchedRets => mantle_instr::ExitMode::PatchedRets,
            Exit::ReturnFrames => mantle_instr::ExitMode::ReturnFrames,
        }
    }
}

impl SelArgs {
    fn selection(&self) -> Result<Selection, Failure> {
        let mut s = if self.all {
            Selection::all()
        } else {
            Selection::default()
        };
        for f in &self.functions {
            s.add(f);
        }
        if let Some(p) = &self.functions_from {
            let text = std::fs::read_to_string(p).map_err(|e| Failure::io("cannot read", p, &e))?;
            s.add_list(&text);
        }
        if let Some(dir) = &self.from_prof {
            for name in self.hottest_in(dir)? {
                s.add_exact(&name);
            }
        }
        if s.is_empty() {
            return Err(Failure::new(
                EXIT_USAGE,
                "choose functions: --all, -f NAME, --functions-from FILE or --from-prof SESSION",
            ));
        }
        Ok(s)
    }
}

impl SelArgs {
    /// The hottest functions of a `mantle prof` session (exclusive
    /// samples), said on standard error.
    fn hottest_in(&self, dir: &Path) -> Result<Vec<String>, Failure> {
        let r = mantle_prof::report::report(dir, &mantle_prof::ReportOpts::default())?;
        let image = match (&self.prof_image, &r.main_binary) {
            (Some(i), _) => i.clone(),
            (None, Some(m)) => m.clone(),
            (None, None) => {
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!(
                        "{}: no main binary; name one with --prof-image",
                        dir.display()
                    ),
                ))
            }
        };
        let rows: Vec<(String, u64)> = r
            .symbols
            .iter()
            .filter(|s| s.image.contains(&image))
            .map(|s| (s.symbol.clone(), s.samples))
            .collect();
        let (names, got) = mantle_instr::select::hottest(&rows, self.share)
            .map_err(|e| Failure::new(EXIT_USAGE, format!("{}: {image}: {e}", dir.display())))?;
        eprintln!(
            "{}: {} functions make up {got:.1}% of the {} samples in {image}",
            dir.display(),
            names.len(),
            rows.iter().map(|r| r.1).sum::<u64>()
        );
        Ok(names)
    }
}

fn lib_failure(path: &Path, e: mantle_instr::Error) -> Failure {
    let code = match e {
        mantle_instr::Error::Write(_) => EXIT_FAILURE,
        _ => EXIT_USAGE,
    };
    Failure::new(code, format!("{}: {e}", path.display()))
}

fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::io("cannot read", path, &e))
}

/// The first free id of an existing map (0 for a new one).
fn next_id(map: &str) -> u32 {
    map.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split('\t').next()?.parse::<u32>().ok())
        .map(|i| i.saturating_add(1))
        .max()
        .unwrap_or(0)
}

fn print(r: &Report, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(r).unwrap_or_default());
        return;
    }
    println!(
        "{}: {} instrumented, {} refused, {} stubs, {} exit stubs, {} trampolines{}",
        r.input,
        r.instrumented,
        r.refused,
        r.stubs,
        r.exit_stubs,
        r.trampolines,
        if r.cet_cleared {
            " (CET property cleared)"
        } else {
            ""
        }
    );
    for f in &r.functions {
        match &f.outcome {
            mantle_instr::Outcome::Instrumented {
                id,
                stub,
                patched_bytes,
                exit,
                patched_rets,
                xmm_kept,
                ..
            } => {
                let detail = match xmm_kept {
                    Some([e, x]) => format!("xmm kept {e}/{x}"),
                    None => format!("{patched_rets} rets"),
                };
                println!(
                    "  ok      {:<32} id {id} stub {stub} ({patched_bytes} bytes), exit: {exit} ({detail})",
                    f.name
                )
            }
            mantle_instr::Outcome::Refused { reason } => {
                println!("  refused {:<32} {reason}", f.name)
            }
        }
    }
}

pub fn run(cmd: InstrCmd) -> Result<(), Failure> {
    match cmd {
        InstrCmd::Plan { input, sel, json } => {
            let data = read(&input)?;
            let r = mantle_instr::plan_file(
                &data,
                &input.display().to_string(),
                &sel.selection()?,
                0,
                sel.mode(),
            )
            .map_err(|e| lib_failure(&input, e))?;
            print(&r, json);
            Ok(())
        }
        InstrCmd::Rewrite {
            input,
            output,
            sel,
            map,
            json,
            runtime,
        } => {
            let data = read(&input)?;
            let old_map = match &map {
                Some(m) if m.exists() => {
                    std::fs::read_to_string(m).map_err(|e| Failure::io("cannot read", m, &e))?
                }
                _ => String::from("# mantle-instr map v1: id\tname\tobject\n"),
            };
            let first = next_id(&old_map);
            let linked = mantle_instr::linked::is_linked(&data);
            let (bytes, mut r) = if linked {
                let rt = linked_runtime(runtime.as_deref())?;
                mantle_instr::linked::rewrite_file(
                    &data,
                    &input.display().to_string(),
                    &sel.selection()?,
                    first,
                    sel.mode(),
                    &rt,
                )
            } else {
                mantle_instr::rewrite_file(
                    &data,
                    &input.display().to_string(),
                    &sel.selection()?,
                    first,
                    sel.mode(),
                )
            }
            .map_err(|e| lib_failure(&input, e))?;
            std::fs::write(&output, bytes).map_err(|e| Failure::io("cannot write", &output, &e))?;
            if linked {
                keep_mode(&input, &output)?;
            }
            r.output = Some(output.display().to_string());
            if let Some(m) = &map {
                let text = old_map + &r.map_lines();
                std::fs::write(m, text).map_err(|e| Failure::io("cannot write", m, &e))?;
            }
            print(&r, json);
            Ok(())
        }
        InstrCmd::Verify {
            original,
            rewritten,
            stdin,
            args,
        } => verify(&original, &rewritten, stdin.as_deref(), &args),
    }
}

/// The runtime a rewritten linked file loads, by absolute path. Refused
/// when someone else could replace it: the loader runs whatever that path
/// names inside every run of the rewritten program, set-id ones included
/// (an absolute DT_NEEDED is not subject to AT_SECURE's rules).
fn linked_runtime(given: Option<&Path>) -> Result<String, Failure> {
    use std::os::unix::fs::MetadataExt;
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| Some(e.parent()?.join("libmantle_instr_rt.so")))
            .filter(|p| p.exists())
            .ok_or_else(|| {
                Failure::new(
                    EXIT_USAGE,
                    "no libmantle_instr_rt.so beside mantle: give --runtime PATH",
                )
            })?,
    };
    let path = path
        .canonicalize()
        .map_err(|e| Failure::io("cannot find", &path, &e))?;
    let mut p = Some(path.as_path());
    while let Some(at) = p {
        let m = std::fs::metadata(at).map_err(|e| Failure::io("cannot stat", at, &e))?;
        let sticky_dir = m.is_dir() && m.mode() & 0o1000 != 0;
        if m.mode() & 0o022 != 0 && !sticky_dir {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "{}: writable by group or others, so they could replace the runtime the rewritten program loads",
                    at.display()
                ),
            ));
        }
        p = at.parent();
    }
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| Failure::new(EXIT_USAGE, format!("{}: not UTF-8", path.display())))
}

/// Gives a rewritten program its original's permission bits, set-id bits
/// excepted (like cp without -p).
fn keep_mode(from: &Path, to: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(from).map_err(|e| Failure::io("cannot stat", from, &e))?;
    let perm = std::fs::Permissions::from_mode(m.permissions().mode() & 0o777);
    std::fs::set_permissions(to, perm).map_err(|e| Failure::io("cannot chmod", to, &e))
}

/// The input both programs of `verify` get, read once: `--stdin FILE`,
/// or this command's standard input (`--stdin -`, or no option unless
/// standard input is a terminal, as a filter reads it).
fn verify_input(stdin: Option<&Path>) -> Result<Vec<u8>, Failure> {
    use std::io::{IsTerminal, Read};
    match stdin {
        Some(p) if p != Path::new("-") => {
            std::fs::read(p).map_err(|e| Failure::io("cannot read", p, &e))
        }
        given => {
            let mut i = std::io::stdin().lock();
            if given.is_none() && i.is_terminal() {
                return Ok(Vec::new());
            }
            let mut v = Vec::new();
            i.read_to_end(&mut v)
                .map_err(|e| Failure::io("cannot read", Path::new("standard input"), &e))?;
            Ok(v)
        }
    }
}

fn verify(a: &Path, b: &Path, stdin: Option<&Path>, args: &[String]) -> Result<(), Failure> {
    use std::io::Write;
    use std::process::Stdio;
    let input = verify_input(stdin)?;
    let run = |p: &Path| -> Result<std::process::Output, Failure> {
        let cannot = |e: std::io::Error| {
            Failure::new(
                exit_code(LibError::Io(&e)),
                format!("cannot run {}: {e}", p.display()),
            )
        };
        let mut child = std::process::Command::new(p)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(cannot)?;
        let mut pipe = child.stdin.take();
        // Written from a thread while the output is read, so neither side
        // waits on a full pipe; a program that stops reading early (EPIPE)
        // is its own business, as it is under a shell.
        std::thread::scope(|s| {
            s.spawn(|| {
                if let Some(w) = pipe.as_mut() {
                    let _ = w.write_all(&input);
                }
                drop(pipe.take());
            });
            child.wait_with_output().map_err(cannot)
        })
    };
    let (x, y) = (run(a)?, run(b)?);
    let mut diffs = Vec::new();
    if x.status.code() != y.status.code() || x.status.to_string() != y.status.to_string() {
        diffs.push(format!("exit status: {} vs {}", x.status, y.status));
    }
    if x.stdout != y.stdout {
        diffs.push(format!(
            "standard output differs ({} vs {} bytes)",
            x.stdout.len(),
            y.stdout.len()
        ));
    }
    if x.stderr != y.stderr {
        diffs.push(format!(
            "standard error differs ({} vs {} bytes)",
            x.stderr.len(),
            y.stderr.len()
        ));
    }
    if diffs.is_empty() {
        println!(
            "same: exit status {}, {} bytes of output",
            x.status,
            x.stdout.len()
        );
        Ok(())
    } else {
        Err(Failure::new(EXIT_FAILURE, diffs.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn next_id_continues_the_map() {
        assert_eq!(super::next_id("# header\n"), 0);
        assert_eq!(super::next_id("# h\n0\ta\tx.o\n7\tb\tx.o\n3\tc\ty.o\n"), 8);
    }
}
