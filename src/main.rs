//! The chaosrun command line: parse the flags and dispatch to the
//! subcommand's module under `chaosrun::cli` (a table run when no subcommand
//! is given); nothing else. Exit codes are documented in `chaosrun::cli`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use chaosrun::cli;

#[derive(Parser)]
#[command(
    name = "chaosrun",
    version,
    about = "Chaos-test the liveness of an LLM agent from the outside",
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  chaosrun scenarios.yaml                              # the bundled reference agent\n  chaosrun --agent examples/hermes/hermes scenarios.yaml\n  chaosrun scenarios.yaml --only provider_hang         # reproduce one locally"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: cli::run::Args,
}

#[derive(Subcommand)]
enum Command {
    /// Run the fault provider alone, for probing an agent by hand.
    Serve(cli::serve::Args),
    /// Merge JSON reports (shards, matrix jobs) into one report and one exit code.
    Merge(cli::merge::Args),
    /// Per scenario over the last recorded runs: pass rate, NEW FAIL / FIXED /
    /// FLAKY / FAIL / PASS, where it last changed, and its duration trend.
    History(chaosrun::history::command::Args),
    /// Re-run the oracle over saved scenario folders (`--artifacts DIR
    /// --keep-all`) and print the verdicts as a table run would.
    Judge(cli::judge::Args),
    /// The agent × scenario results table (markdown, or `--html`) from JSON
    /// reports, one per agent.
    Matrix(cli::matrix::Args),
    /// The stdio MCP server an agent spawns from its config during a run: a
    /// relay to the scenario's private socket (started by the agent, never by hand).
    #[command(name = "mcp-stdio")]
    McpStdio {
        /// The scenario's MCP socket (from `{{mcp_args_json}}`).
        #[arg(long, value_name = "PATH")]
        socket: std::path::PathBuf,
    },
    /// Generate seeded trials (tool-using tasks with fault schedules), judge
    /// each with the oracle, confirm and shrink a failure to one table row.
    Explore(cli::explore::Args),
    /// The known agents (pinned version, wire, capabilities, installed?);
    /// `agents setup NAME` installs one into the user's cache; `agents check
    /// AGENT` says whether its profile still drives it.
    Agents(chaosrun::catalog::cli::AgentsArgs),
    /// The first release of an agent whose verdict on one row changed:
    /// installs the versions between --good and --bad as needed and runs the row.
    Bisect(cli::bisect::Args),
    /// The built-in seed tables; `tables write DIR` writes them out for editing.
    Tables(chaosrun::catalog::cli::TablesArgs),
    #[command(name = "__guard", hide = true)]
    Guard {
        run: String,
        #[arg(long)]
        remove: Vec<std::path::PathBuf>,
    },
}

/// Blocks of 128 KiB and more are always mapped on their own, so freeing one
/// gives it back to the system at once. glibc's default raises this
/// threshold to the largest block freed so far (up to 32 MiB), after which a
/// multi-MB request body or argument lives in a per-thread arena that keeps
/// it resident: a flood of such requests then holds one per arena for good.
fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets one allocator parameter; called before any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

fn main() -> ExitCode {
    fixed_mmap_threshold();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::McpStdio { socket }) => {
            ExitCode::from(chaosrun::mcp::shim::run(&socket).clamp(0, 255) as u8)
        }
        Some(Command::Guard { run, remove }) => {
            ExitCode::from(chaosrun::proc_hygiene::run_guard(&run, &remove) as u8)
        }
        Some(Command::Serve(args)) => cli::serve::main(args),
        Some(Command::Merge(args)) => cli::merge::main(args),
        Some(Command::History(args)) => match chaosrun::history::command::run(&args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => cli::usage(e),
        },
        Some(Command::Judge(args)) => cli::judge::main(args),
        Some(Command::Matrix(args)) => cli::matrix::main(args),
        Some(Command::Explore(args)) => ExitCode::from(cli::explore::main(args)),
        Some(Command::Agents(args)) => ExitCode::from(chaosrun::catalog::cli::agents(&args)),
        Some(Command::Bisect(args)) => cli::bisect::main(args),
        Some(Command::Tables(args)) => ExitCode::from(chaosrun::catalog::cli::tables(&args)),
        None => cli::run::main(cli.run),
    }
}
