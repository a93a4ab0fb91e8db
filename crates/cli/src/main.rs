//! The `mantle` binary: everything is in the `mantle_cli` library.

fn main() -> std::process::ExitCode {
    mantle_cli::main()
}
