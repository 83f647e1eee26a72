//! The command line as a whole: parses it, loads the configuration, runs
//! the chosen subcommand, and alone maps errors to exit statuses: 2 for
//! usage errors, 1 for configuration and start failures (`shard-stdio`
//! has its own statuses, `shard::stdio::exit`). `src/main.rs` only hands
//! it the arguments.

use std::process::ExitCode;

use crate::cli::{self, Command, ServeArgs};
use crate::{config, hub, mock_worker, reply, util};

/// Runs the command line `args` (without the program name) to its exit
/// status.
pub fn main(args: &[String]) -> ExitCode {
    let command = match cli::parse(args) {
        Ok(command) => command,
        Err(err) => {
            eprintln!("simplex-hub: {err}");
            eprintln!("try 'simplex-hub --help'");
            return ExitCode::from(2);
        }
    };
    let result = match command {
        Command::Help => {
            print!("{}", cli::HELP);
            Ok(())
        }
        Command::Version => {
            println!("simplex-hub {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::CheckConfig(args) => check_config(&args),
        Command::Serve(args) => serve(args),
        Command::MockWorker(args) => mock_worker(&args),
        Command::ShardStdio(args) => return ExitCode::from(crate::shard::stdio::run(&args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("simplex-hub: {err}");
            ExitCode::from(1)
        }
    }
}

type BoxError = Box<dyn std::error::Error>;

fn check_config(args: &ServeArgs) -> Result<(), BoxError> {
    let loaded = config::load(args.config.as_deref(), &args.overrides)?;
    let source = match &loaded.source {
        config::ConfigSource::File(path) => path.display().to_string(),
        config::ConfigSource::Defaults => "built-in defaults".to_string(),
    };
    println!("// configuration: {source}");
    println!(
        "{}",
        serde_json::to_string_pretty(&config::redacted(&loaded))?
    );
    Ok(())
}

fn serve(args: ServeArgs) -> Result<(), BoxError> {
    init_logging(args.log_level.as_deref().unwrap_or("info"));
    let loaded = config::load(args.config.as_deref(), &args.overrides)?;
    match &loaded.source {
        config::ConfigSource::File(path) => log::info!("configuration: {}", path.display()),
        config::ConfigSource::Defaults => match config::write_first_run(&loaded)? {
            Some(path) => log::info!(
                "configuration: built-in defaults (written to {})",
                path.display()
            ),
            None => log::info!("configuration: built-in defaults"),
        },
    }
    log::info!("data directory: {}", loaded.config.data_dir.display());

    // Signals only request shutdown; this thread performs it.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])?;
    let options = hub::RunOptions {
        static_dir: args.static_dir,
    };
    let running = crate::run::Running::start(loaded.config, options)?;
    // A client's `daemon.shutdown` ends the wait below as a signal does.
    let handle = signals.handle();
    running
        .hub
        .set_shutdown_request(Box::new(move || handle.close()));
    log::info!(
        "panel: http://{}",
        reply::display_addr(&running.hub.local_addr())
    );
    match signals.forever().next() {
        Some(signal) => log::info!("received signal {signal}, shutting down"),
        None => log::info!("shutdown requested by a client, shutting down"),
    }
    running.stop();
    Ok(())
}

fn mock_worker(args: &cli::MockWorkerArgs) -> Result<(), BoxError> {
    mock_worker::run(args)?;
    Ok(())
}

/// Logs go to stderr as `<time> <LEVEL> <message>`. Tokens and URLs that
/// carry them are never logged.
fn init_logging(level: &str) {
    let filter = match level {
        "trace" => log::LevelFilter::Trace,
        "debug" => log::LevelFilter::Debug,
        "warn" => log::LevelFilter::Warn,
        "error" => log::LevelFilter::Error,
        "silent" => log::LevelFilter::Off,
        _ => log::LevelFilter::Info,
    };
    env_logger::Builder::new()
        .filter_level(log::LevelFilter::Warn)
        .filter_module("simplex_hub", filter)
        .format(|buf, record| {
            use std::io::Write;
            writeln!(
                buf,
                "{} {:<5} {}",
                util::time::now_rfc3339(),
                record.level(),
                record.args()
            )
        })
        .init();
}
