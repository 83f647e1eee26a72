//! simplex-hub: one binary that supervises AI agent worker processes and
//! serves the operator panel. Everything, the command line included, is
//! in the library (`simplex_hub::main`).

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    simplex_hub::main(&args)
}
