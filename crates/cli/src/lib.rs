//! `mantle`: the command-line tool. Thin: parse the command line (flags),
//! run the command (one module per command family, calling the subsystem
//! crates), and turn the result into an exit code (exit: the one table of
//! codes and the one mapping from the libraries' typed errors, README
//! "Exit codes"). Rendering of text and JSON is in render.
//!
//! A library with a one-line binary (`src/main.rs`): the workspace's
//! documentation then has the CLI's modules as `mantle_cli` beside
//! libmantle's `mantle` (a binary named `mantle` would collide with it).
//!
//! Privilege is `mantle_sys::os::privileged()` (capabilities in the
//! initial user namespace), never `euid == 0`: inside `unshare -Ur` a
//! user is uid 0 and still has no power over the machine's BPF objects.

mod comp;
mod deadlock;
mod demo;
mod doctor;
mod exec;
mod exit;
mod flags;
mod input;
mod instr;
mod lifeline;
mod manual;
mod names;
mod offload;
mod otlp;
mod prof;
mod render;
mod run;
mod selfset;
mod tag;
mod tags;

use exit::Failure;
use flags::{Cli, Cmd};
use std::process::ExitCode;

// The command modules' tests reach the exit table as `crate::EXIT_*`.
#[cfg(test)]
use exit::{EXIT_MISSING, EXIT_NOT_FOUND, EXIT_USAGE};

/// The whole program: `mantle`'s `main` calls this and exits with its code.
pub fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes
    // away (`mantle tag lifeline x | head`): Rust ignores SIGPIPE by default,
    // which turns it into a panic in print!.
    // SAFETY: resetting a signal disposition at start-up, before any thread.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = flags::parse_args();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            // An empty message: the exit code is the whole answer
            // (`tags status --quiet`).
            if !f.message.is_empty() {
                eprintln!("mantle: {}", exit::plain(&f.message));
            }
            ExitCode::from(f.code)
        }
    }
}

/// Runs one command line.
fn run(cli: Cli) -> Result<(), Failure> {
    match cli.cmd {
        Cmd::Doctor { json } => {
            doctor::run(json);
            Ok(())
        }
        Cmd::Tags(c) => tags::run(c),
        Cmd::Tag(c) => tag::run(c),
        Cmd::Demo { json } => Ok(demo::run(json)?),
        Cmd::Prof(c) => Ok(prof::run(c)?),
        Cmd::Run(a) => run::run(*a),
        Cmd::Exec(c) => exec::run(c),
        Cmd::Instr(c) => instr::run(c),
        Cmd::Comp(c) => comp::run(c),
        Cmd::Completions { shell } => {
            manual::completions(shell);
            Ok(())
        }
        Cmd::Man { command, out } => manual::man(&command, out.as_deref()),
    }
}
