//! Proof that chaosrun catches real bugs: the reference agent's `--bug NAME`
//! options each re-introduce one classic liveness bug; for each, chaosrun must
//! fail the scenario that exercises it on the right invariant, and only that
//! one, on every wire the agent can speak (`--wire`, one wire at a time).
//! (The same scenarios pass without the bug: see reference_table.rs.)
//!
//! By default each case runs on one wire, the wires taken in turn, so every
//! case and every wire is exercised in a quarter of the time (CI's bounded
//! subset); `CHAOSRUN_FULL=1` runs every case on every wire.
//! The MCP cancel bugs also run over streamable HTTP (their rows run over
//! stdio, the profile's first transport, above).

mod common;

use common::*;
use std::time::Duration;

struct Case {
    bug: &'static str,
    scenario: &'static str,
    invariant: &'static str,
    /// Deadline scale, so a hang is caught in seconds rather than minutes.
    scale: &'static str,
    /// A phrase the violation must contain.
    says: &'static str,
}

const CASES: &[Case] = &[
    Case {
        bug: "retry_storm",
        scenario: "provider_500_forever",
        invariant: "provider_calls",
        scale: "1",
        says: "the bound is 16",
    },
    Case {
        bug: "retry_400",
        scenario: "provider_400_forever",
        invariant: "provider_calls",
        scale: "1",
        says: "the bound is 2",
    },
    Case {
        bug: "no_stale_timeout",
        scenario: "provider_silent_after_headers_then_recover",
        invariant: "termination",
        scale: "1",
        says: "deadline",
    },
    Case {
        bug: "leaked_background",
        scenario: "tool_background_swarm",
        invariant: "process_hygiene",
        scale: "1",
        says: "sleep 3600",
    },
    Case {
        bug: "lost_parallel_result",
        scenario: "parallel_8_terminal_calls",
        invariant: "history_integrity",
        scale: "1",
        says: "carried another output",
    },
    Case {
        bug: "wedged_after_interrupt",
        scenario: "interrupt_provider_hang",
        invariant: "reusability",
        scale: "1",
        says: "not answered",
    },
    Case {
        bug: "stdin_open",
        scenario: "tool_reads_stdin",
        invariant: "termination",
        scale: "0.25",
        says: "deadline",
    },
    Case {
        bug: "huge_output_whole",
        scenario: "tool_huge_output",
        invariant: "history_integrity",
        scale: "1",
        says: "at most",
    },
    Case {
        bug: "memory_leak",
        scenario: "tool_output_memory",
        invariant: "memory",
        scale: "1",
        says: "(`memory_growth_mb`): baseline",
    },
    // Within the old absolute 512 MB bound (~510 MB and ~340 MB on a 30 MB
    // agent); over the growth the row allows on the agent's own footprint.
    Case {
        bug: "output_copies",
        scenario: "tool_output_memory",
        invariant: "memory",
        scale: "1",
        says: "(`memory_growth_mb`): baseline",
    },
    Case {
        bug: "output_read_whole",
        scenario: "tool_output_memory",
        invariant: "memory",
        scale: "1",
        says: "(`memory_growth_mb`): baseline",
    },
    Case {
        bug: "corrupt_store",
        scenario: "provider_500_forever",
        invariant: "store_integrity",
        scale: "1",
        says: "integrity_check",
    },
    Case {
        bug: "mcp_no_timeout",
        scenario: "mcp_call_hangs",
        invariant: "termination",
        scale: "0.25",
        says: "deadline",
    },
    Case {
        bug: "mcp_no_cancel",
        scenario: "interrupt_mcp_call",
        invariant: "termination",
        scale: "1",
        says: "notifications/cancelled",
    },
    Case {
        bug: "mcp_timeout_no_cancel",
        scenario: "mcp_call_hangs",
        invariant: "termination",
        scale: "1",
        says: "never sent notifications/cancelled",
    },
    Case {
        bug: "mcp_leak_server",
        scenario: "mcp_stdio_server_outlives_agent",
        invariant: "process_hygiene",
        scale: "1",
        says: "mcp-stdio",
    },
    Case {
        bug: "mcp_drop_error_result",
        scenario: "mcp_error_result",
        invariant: "history_integrity",
        scale: "1",
        says: "no result",
    },
    Case {
        bug: "ignore_retry_after",
        scenario: "provider_429_retry_after_honoured",
        invariant: "provider_calls",
        scale: "1",
        says: "with retry-after 2 s",
    },
    Case {
        bug: "keepalive_resets_idle",
        scenario: "provider_keepalive_forever",
        invariant: "termination",
        scale: "0.5",
        says: "deadline",
    },
    Case {
        bug: "compaction_loop",
        scenario: "context_window_below_system_prompt",
        invariant: "provider_calls",
        scale: "1",
        says: "the bound is 3",
    },
    // MCP servers that start slowly or refuse.
    Case {
        bug: "mcp_boot_drop",
        scenario: "mcp_slow_initialize",
        invariant: "reusability",
        scale: "1",
        says: "a silent drop",
    },
    Case {
        bug: "mcp_retry_unauthorized",
        scenario: "mcp_http_unauthorized",
        invariant: "provider_calls",
        scale: "1",
        says: "refused as unauthorized (401)",
    },
    Case {
        bug: "mcp_stale_schema",
        scenario: "mcp_tool_schema_changes",
        invariant: "reusability",
        scale: "1",
        says: "kept the stale schema",
    },
    // A batch's answers handed out in arrival order: each MCP call must
    // carry its own text (own_outputs on `mcp_probe` calls).
    Case {
        bug: "mcp_replies_by_arrival",
        scenario: "mcp_parallel_calls",
        invariant: "history_integrity",
        scale: "1",
        says: "(mcp_probe ",
    },
    // A legacy SSE server that never answers initialize: start-up bounded.
    Case {
        bug: "mcp_sse_no_deadline",
        scenario: "mcp_sse_initialize_hangs",
        invariant: "termination",
        scale: "0.25",
        says: "never said ready",
    },
    Case {
        bug: "mcp_sse_no_deadline",
        scenario: "mcp_sse_endpoint_never_sent",
        invariant: "termination",
        scale: "0.25",
        says: "never said ready",
    },
    // A server lost between turns: its tools must come back.
    Case {
        bug: "mcp_no_reconnect",
        scenario: "mcp_server_restarts_between_turns",
        invariant: "reusability",
        scale: "1",
        says: "call never reached it",
    },
    // Subagents.
    Case {
        bug: "subagent_no_deadline",
        scenario: "subagent_provider_hangs",
        invariant: "termination",
        scale: "0.25",
        says: "deadline",
    },
    Case {
        bug: "orphan_subagent",
        scenario: "interrupt_subagent",
        invariant: "provider_calls",
        scale: "1",
        says: "after the parent's turn ended: +",
    },
    // A subagent left inside its hung model call (issue 47.4).
    Case {
        bug: "subagent_abandoned_in_call",
        scenario: "interrupt_subagent",
        invariant: "provider_calls",
        scale: "1",
        says: "the subagent was left inside its call",
    },
    Case {
        bug: "subagent_abandoned_in_call",
        scenario: "subagent_provider_hangs",
        invariant: "provider_calls",
        scale: "1",
        says: "the subagent was left inside its call",
    },
    // Tools that hold the pipe.
    Case {
        bug: "wait_for_pipe_eof",
        scenario: "tool_fg_child_holds_stdout",
        invariant: "termination",
        scale: "0.25",
        says: "deadline",
    },
    Case {
        bug: "wait_for_pipe_eof",
        scenario: "tool_child_ignores_term_in_new_session",
        invariant: "termination",
        scale: "0.25",
        says: "deadline",
    },
    Case {
        bug: "stdin_open",
        scenario: "tool_background_reads_stdin",
        invariant: "history_integrity",
        scale: "1",
        says: "eof-",
    },
    // Credentials that expire mid-run.
    Case {
        bug: "auth_retry_same_key",
        scenario: "credential_revoked_mid_turn",
        invariant: "provider_calls",
        scale: "1",
        says: "retried it with the same credential",
    },
    Case {
        bug: "auth_cached_key",
        scenario: "credential_expires_mid_turn",
        invariant: "reusability",
        scale: "1",
        says: "the probe was not answered",
    },
    // The agent's own sandbox nested in chaosrun's (issue 35.5).
    Case {
        bug: "sandbox_silent",
        scenario: "agent_sandbox_denied",
        invariant: "agent_sandbox",
        scale: "1",
        says: "nor named why",
    },
    // A sandbox failure that names no cause, and a silent fallback (issue 47.3).
    Case {
        bug: "sandbox_generic_error",
        scenario: "agent_sandbox_denied",
        invariant: "agent_sandbox",
        scale: "1",
        says: "names a cause",
    },
    Case {
        bug: "sandbox_fallback_silent",
        scenario: "agent_sandbox_denied",
        invariant: "agent_sandbox",
        scale: "1",
        says: "nothing said so",
    },
    // One cause, one failed check (issue 47.8): the subagent never started,
    // so its hang rule never served; the interrupt and the outcome are not
    // checked, naming `fault_served`, so `exercised` is the only failure.
    Case {
        bug: "subagent_fails_at_once",
        scenario: "interrupt_subagent",
        invariant: "exercised",
        scale: "1",
        says: "never answered a call",
    },
    // A child left unreaped (issue 43.6, claude-code #58000): the shell
    // probe of each foreground command stays a zombie for the 3 s the tool
    // hangs, which two samples a second apart see.
    Case {
        bug: "zombie_children",
        scenario: "tool_hang_past_timeout",
        invariant: "process_hygiene",
        scale: "1",
        says: "was left unreaped",
    },
    // A usage limit waited out until its reset (issue 44.8, codex #23722).
    Case {
        bug: "sleep_until_usage_reset",
        scenario: "provider_usage_limit_reached",
        invariant: "termination",
        scale: "0.5",
        says: "deadline",
    },
];

/// Cases run at once (a pool: a new case starts as soon as one ends): more
/// agents booting together on a small machine can take longer than a
/// 0.25-scaled boot deadline (30 s) to say `ready`.
const AT_ONCE: usize = 7;

/// Every wire the provider and the reference agent speak.
const WIRES: &[&str] = &["openai-chat", "openai-responses", "anthropic", "gemini"];

#[test]
fn each_bug_fails_on_its_own_invariant_only_on_every_wire() {
    let plan: Vec<(&'static str, &'static Case)> = if full_matrix() {
        WIRES
            .iter()
            .flat_map(|w| CASES.iter().map(move |c| (*w, c)))
            .collect()
    } else {
        CASES
            .iter()
            .enumerate()
            .map(|(i, c)| (WIRES[i % WIRES.len()], c))
            .collect()
    };
    let covered: std::collections::BTreeSet<_> = plan.iter().map(|(w, _)| *w).collect();
    assert_eq!(covered.len(), WIRES.len(), "every wire is exercised");
    let next = std::sync::atomic::AtomicUsize::new(0);
    let problems: Vec<String> = std::thread::scope(|s| {
        let pool: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                s.spawn(|| {
                    let mut found = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some(&(wire, c)) = plan.get(i) else {
                            return found;
                        };
                        found.extend(case_on(wire, c));
                    }
                })
            })
            .collect();
        pool.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

/// The memory bugs alone (each on its own wire): the growth check catches
/// the agent that keeps three copies of the output and the one that reads
/// it whole before cutting it, which an absolute 512 MB bound passed, and
/// still the one that keeps four (`cargo test --test catches_bugs memory`).
#[test]
fn the_memory_bugs_fail_memory_growth_only() {
    let cases = CASES.iter().filter(|c| c.scenario == "tool_output_memory");
    let problems: Vec<String> = cases
        .enumerate()
        .flat_map(|(i, c)| case_on(WIRES[i % WIRES.len()], c))
        .collect();
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

/// The MCP bugs whose rows run on the profile's first transport (stdio)
/// above: caught over streamable HTTP too (the reference profile with its
/// transports reversed), one wire each in turn: a lost connection is a
/// stdio server that exited there and an HTTP session answered 404 here.
const OVER_HTTP: &[&str] = &["mcp_no_cancel", "mcp_timeout_no_cancel", "mcp_no_reconnect"];

#[test]
fn the_mcp_http_bugs_are_caught_over_http_too() {
    let dir = tempfile::tempdir().unwrap();
    let profile = reference_profile_http_first(dir.path());
    let problems: Vec<String> = CASES
        .iter()
        .filter(|c| OVER_HTTP.contains(&c.bug))
        .enumerate()
        .flat_map(|(i, c)| {
            let wire = WIRES[(i + 1) % WIRES.len()];
            let artifacts = dir.path().join(c.bug);
            let extra = [
                "--agent",
                profile.to_str().unwrap(),
                "--artifacts",
                artifacts.to_str().unwrap(),
                "--keep-all",
            ];
            let mut found = case_with(wire, c, &extra);
            let obs = read_json(&artifacts.join(c.scenario).join("observation.json"));
            if obs["mcp"]["transport"] != "http" {
                found.push(format!(
                    "{}: ran over {}, not http",
                    c.bug, obs["mcp"]["transport"]
                ));
            }
            found
        })
        .collect();
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

/// Run `c` on `wire`; the problems found, each naming its wire.
fn case_on(wire: &'static str, c: &'static Case) -> Vec<String> {
    case_with(wire, c, &[])
}

/// Run `c` on `wire` with `extra` arguments.
fn case_with(wire: &'static str, c: &'static Case, extra: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir
        .path()
        .join(format!("{}-{}-{wire}.json", c.bug, c.scenario));
    let mark = new_mark(c.bug);
    let bug = format!("--agent-arg=--bug={}", c.bug);
    let mut args = vec![
        "scenarios.yaml",
        "--only",
        c.scenario,
        &bug,
        "--wire",
        wire,
        "--deadline-scale",
        c.scale,
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = chaosrun(&mark, &args);
    let mut problems = Vec::new();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.code() != Some(1) {
        problems.push(format!(
            "[wire {wire}] {}: exit {:?}, expected 1\n{stdout}",
            c.bug, out.status
        ));
        return problems;
    }
    let report = read_json(&json);
    let failed = failed_invariants(&report, c.scenario);
    if failed != [c.invariant] {
        problems.push(format!(
            "[wire {wire}] {}: failed {failed:?}, expected only [{}]\n{}",
            c.bug,
            c.invariant,
            violations(&report, c.scenario).join("\n")
        ));
    } else if !violations(&report, c.scenario).join("\n").contains(c.says) {
        problems.push(format!(
            "[wire {wire}] {}: violation does not say {:?}:\n{}",
            c.bug,
            c.says,
            violations(&report, c.scenario).join("\n")
        ));
    }
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    if !left.is_empty() {
        problems.push(format!(
            "[wire {wire}] {}: chaosrun left processes behind: {left:?}",
            c.bug
        ));
    }
    problems
}
