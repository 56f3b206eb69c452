#!/usr/bin/env python3
"""Regenerate tests/golden/: recorded scenario runs that `chaosrun judge`
re-judges on every test run (tests/judge.rs), pinning the oracle.

Usage (from the repository root, after `cargo build`):

    python3 scripts/golden.py            # every case
    python3 scripts/golden.py CASE...    # only these (folder names under tests/golden)

Each case is one row of a shipped table run against the bundled reference
agent on the openai-chat wire with a fixed seed, passing as shipped or with
one `--bug NAME` that fails it on a known invariant (the `store_damage`
rows on its JSONL-transcript profile, `agent-jsonl.yaml`). The run's saved folder
(`--artifacts DIR --keep-all`) is normalised so that regenerating changes as
little as possible: the run id and temp paths become fixed words, pids are
renumbered in order of appearance (in `pid`/`ppid` fields and `pid N` text),
ports become 0, `started_unix` a fixed moment (journal heartbeat
times shifted with it). Relative event times stay: the oracle
judges them. The normalised observation is judged by `chaosrun judge`; its
checks must have the same outcomes as the run's own (else the case is not
written), and are saved as the golden's checks.json. A case whose run does
not come out as expected (a pass row that failed under load, a bug not
caught) is retried once, then reported; nothing of it is written.

Needs: python3, the debug binary (or CHAOSRUN=path), the reference agent's
python3. Takes a few minutes on 2 cores.
"""

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(REPO, "tests", "golden")
CHAOSRUN = os.environ.get("CHAOSRUN", os.path.join(REPO, "target", "debug", "chaosrun"))
SEED = "7"
WIRE = "openai-chat"
# The Unix time every golden run starts at.
EPOCH = 1_700_000_000.0

# Rows that pass as shipped: together they make every check the reference
# profile supports pass at least once.
PASS_ROWS = [
    "provider_400_forever",
    "provider_500_forever",
    "provider_stall_reasoning_model",
    "provider_429_retry_after_honoured",
    "context_overflow_tool_output",
    "parallel_8_terminal_calls",
    "tool_background_swarm",
    "tool_background_reads_stdin",
    "interrupt_hung_tool",
    "interrupt_subagent",
    "interrupt_mcp_call",
    "mcp_call_hangs",
    "mcp_http_unauthorized",
    "mcp_tool_schema_changes",
    "tool_output_memory",
    "credential_expires_mid_turn",
    "credential_refreshed_mid_turn",
    "agent_sandbox_nested",
    "agent_sandbox_denied",
    "tool_hang_past_timeout",
]
PROCESS_ROWS = [
    "kill_during_tool_side_effect",
    "kill_with_background_job",
    "kill_mid_stream",
    "stop_during_tool",
    "kill_at_store_write",
    # Recorded where the kernel could OOM-kill (root, a memory cgroup
    # controller); judging it needs neither.
    "oom_kill_mid_turn",
]
# (bug, row, deadline scale, invariant it must fail): the reference agent's
# bugs, as tests/catches_bugs.rs and tests/process_faults.rs run them.
BUG_ROWS = [
    ("retry_storm", "provider_500_forever", "1", "provider_calls"),
    ("retry_400", "provider_400_forever", "1", "provider_calls"),
    ("no_stale_timeout", "provider_silent_after_headers_then_recover", "1", "termination"),
    ("leaked_background", "tool_background_swarm", "1", "process_hygiene"),
    ("lost_parallel_result", "parallel_8_terminal_calls", "1", "history_integrity"),
    ("wedged_after_interrupt", "interrupt_provider_hang", "1", "reusability"),
    ("huge_output_whole", "tool_huge_output", "1", "history_integrity"),
    ("memory_leak", "tool_output_memory", "1", "memory"),
    ("output_copies", "tool_output_memory", "1", "memory"),
    ("output_read_whole", "tool_output_memory", "1", "memory"),
    ("auth_retry_same_key", "credential_revoked_mid_turn", "1", "provider_calls"),
    ("auth_cached_key", "credential_expires_mid_turn", "1", "reusability"),
    ("sandbox_silent", "agent_sandbox_denied", "1", "agent_sandbox"),
    ("sandbox_generic_error", "agent_sandbox_denied", "1", "agent_sandbox"),
    ("sandbox_fallback_silent", "agent_sandbox_denied", "1", "agent_sandbox"),
    ("corrupt_store", "provider_500_forever", "1", "store_integrity"),
    ("mcp_no_timeout", "mcp_call_hangs", "0.25", "termination"),
    ("mcp_no_cancel", "interrupt_mcp_call", "1", "termination"),
    ("mcp_timeout_no_cancel", "mcp_call_hangs", "1", "termination"),
    ("mcp_leak_server", "mcp_stdio_server_outlives_agent", "1", "process_hygiene"),
    ("mcp_drop_error_result", "mcp_error_result", "1", "history_integrity"),
    ("ignore_retry_after", "provider_429_retry_after_honoured", "1", "provider_calls"),
    ("compaction_loop", "context_window_below_system_prompt", "1", "provider_calls"),
    ("mcp_boot_drop", "mcp_slow_initialize", "1", "reusability"),
    ("mcp_retry_unauthorized", "mcp_http_unauthorized", "1", "provider_calls"),
    ("mcp_stale_schema", "mcp_tool_schema_changes", "1", "reusability"),
    ("subagent_no_deadline", "subagent_provider_hangs", "0.25", "termination"),
    ("orphan_subagent", "interrupt_subagent", "1", "provider_calls"),
    ("subagent_abandoned_in_call", "interrupt_subagent", "1", "provider_calls"),
    # One cause, one failed check (issue 47.8): the fault never served, so
    # the interrupt and the outcome are not checked, naming it.
    ("subagent_fails_at_once", "interrupt_subagent", "1", "exercised"),
    ("stdin_open", "tool_background_reads_stdin", "1", "history_integrity"),
    ("zombie_children", "tool_hang_past_timeout", "1", "process_hygiene"),
]
PROCESS_BUG_ROWS = [
    ("replay_side_effect", "kill_during_tool_side_effect", "1", "side_effects"),
    ("orphan_bg_on_restart", "kill_with_background_job", "1", "process_hygiene"),
    ("lost_result_on_restart", "kill_during_tool_side_effect", "1", "history_integrity"),
    ("replay_from_zero", "kill_mid_stream", "1", "termination"),
    ("resume_rolls_back_turn", "kill_at_store_write", "1", "store_integrity"),
    ("nonatomic_rewrite", "kill_at_store_write", "1", "store_integrity"),
    # The kill never fired (nothing persisted mid-turn): kill_landed_mid_turn
    # and the probe are not checked, naming process_fault_landed.
    ("persist_at_turn_end", "kill_at_store_write", "1", "exercised"),
]

# Rows run on the reference agent's JSONL-transcript profile (the
# store_damage rows are N/A on its SQLite store), passing and with the
# transcript bugs.
JSONL_PROFILE = "examples/reference/agent-jsonl.yaml"
JSONL_ROWS = ["store_damage_truncate_last", "store_damage_fuse_records"]
JSONL_BUG_ROWS = [
    ("store_resume_stops_at_damage", "store_damage_fuse_records", "1", "store_integrity"),
    ("store_append_fused", "store_damage_nul_tail", "1", "store_integrity"),
]
JSONL_CASES = set(JSONL_ROWS) | {f"{r}--{b}" for b, r, _s, _i in JSONL_BUG_ROWS}


def cases():
    """Every case: (name, table, row, bug, scale, invariant or None)."""
    out = [(r, "scenarios.yaml", r, None, "1", None) for r in PASS_ROWS]
    out += [(r, "process_faults.yaml", r, None, "1", None) for r in PROCESS_ROWS]
    out += [(f"{r}--{b}", "scenarios.yaml", r, b, s, i) for b, r, s, i in BUG_ROWS]
    out += [(f"{r}--{b}", "process_faults.yaml", r, b, s, i) for b, r, s, i in PROCESS_BUG_ROWS]
    out += [(r, "process_faults.yaml", r, None, "1", None) for r in JSONL_ROWS]
    out += [(f"{r}--{b}", "process_faults.yaml", r, b, s, i) for b, r, s, i in JSONL_BUG_ROWS]
    return out


def run_case(case, work):
    """Run one case; (saved folder, problem or None)."""
    name, table, row, bug, scale, invariant = case
    for attempt in (1, 2):
        art = os.path.join(work, f"{name}-{attempt}")
        cmd = [CHAOSRUN, table, "--only", row, "--wire", WIRE, "--seed", SEED,
               "--deadline-scale", scale, "--artifacts", art, "--keep-all", "--no-progress"]
        if bug:
            cmd.append(f"--agent-arg=--bug={bug}")
        if name in JSONL_CASES:
            cmd += ["--agent", JSONL_PROFILE]
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        folder = os.path.join(art, row)
        problem = judge_problem(folder, bug, invariant, out)
        if problem is None:
            return folder, None
    return None, f"{name}: {problem}"


def judge_problem(folder, bug, invariant, out):
    """Why this run is not the case it should be, or None."""
    try:
        checks = json.load(open(os.path.join(folder, "checks.json")))
    except OSError as e:
        return f"no checks.json ({e}); exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    failed = sorted({c["invariant"] for c in checks if c["status"] == "fail"})
    if bug is None and (failed or out.returncode != 0):
        return f"expected a pass, failed {failed}, exit {out.returncode}\n{out.stdout}"
    if bug is not None and invariant not in failed:
        return f"expected a fail on {invariant}, failed {failed}\n{out.stdout}"
    return None


def normalise(folder, dest):
    """Copy the saved scenario in `folder` to `dest`, normalised."""
    obs_text = open(os.path.join(folder, "observation.json")).read()
    row_text = open(os.path.join(folder, "row.json")).read()
    obs = json.loads(obs_text)
    run_id = obs["tag"].rsplit("-", 1)[0]
    art = os.path.dirname(os.path.dirname(folder))

    def text(s):
        s = s.replace(os.path.dirname(folder) + "/", "/ARTIFACTS/")
        s = s.replace(art, "/ARTIFACTS")
        s = s.replace(run_id, "chaosGOLDEN")
        s = s.replace(CHAOSRUN, "/CHAOSRUN")
        s = re.sub(r"/tmp/chaosrun-agent-[A-Za-z0-9_]+", "/BUNDLED", s)
        s = re.sub(r"/tmp/chaosrun-mcp-[A-Za-z0-9_]+", "/MCPDIR", s)
        s = re.sub(r"/tmp/chaosrun-chaosGOLDEN[-0-9A-Za-z_]*", "/RUNDIR", s)
        s = s.replace(REPO, "/REPO")
        home = os.path.expanduser("~")
        if home not in ("", "/"):
            s = s.replace(home + "/", "/USERHOME/")
        s = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:0", s)
        s = re.sub(r"localhost:\d+", "localhost:0", s)
        return s

    pids = {}

    def pid(n):
        if not isinstance(n, int) or n <= 1:
            return n
        return pids.setdefault(n, 1000 + len(pids))

    def walk(v):
        if isinstance(v, dict):
            return {k: (pid(x) if k in ("pid", "ppid", "pgid", "sid") else walk(x))
                    for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str):
            return text(v)
        return v

    obs = walk(json.loads(text(obs_text)))
    # Unix times: the run starts at a fixed moment; background jobs'
    # heartbeats in the journal (`bg UNIX_TIME [CALL]`) move with it.
    shift = EPOCH - obs["started_unix"]
    obs["started_unix"] = EPOCH
    obs["journal"] = [
        re.sub(r"^bg (\d+(?:\.\d+)?)", lambda m: f"bg {float(m.group(1)) + shift:.6f}", line)
        for line in obs.get("journal", [])
    ]

    def pid_text(v):
        if isinstance(v, dict):
            return {k: pid_text(x) for k, x in v.items()}
        if isinstance(v, list):
            return [pid_text(x) for x in v]
        if isinstance(v, str):
            return re.sub(r"(\bpid\"?\s*[:=]?\s*)(\d+)",
                          lambda m: m.group(1) + str(pids.get(int(m.group(2)), m.group(2))), v)
        return v

    obs = pid_text(obs)
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "observation.json"), "w") as f:
        json.dump(obs, f, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(dest, "row.json"), "w") as f:
        f.write(text(row_text).rstrip("\n") + "\n")
    return json.load(open(os.path.join(folder, "checks.json")))


def outcomes(checks):
    return [(c["invariant"], c["name"], c["status"]) for c in checks]


def main():
    wanted = set(sys.argv[1:])
    todo = [c for c in cases() if not wanted or c[0] in wanted]
    unknown = wanted - {c[0] for c in cases()}
    if unknown:
        sys.exit(f"unknown case(s): {sorted(unknown)}")
    work = tempfile.mkdtemp(prefix="chaosrun-golden-")
    problems = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda c: (c, run_case(c, work)), todo))
    staged = os.path.join(work, "staged")
    recorded = {}
    for case, (folder, problem) in runs:
        if problem:
            problems.append(problem)
            continue
        name, table, row, bug, scale, invariant = case
        dest = os.path.join(staged, name)
        recorded[name] = normalise(folder, dest)
        with open(os.path.join(dest, "golden.json"), "w") as f:
            json.dump({"table": table, "row": row, "bug": bug, "wire": WIRE, "seed": int(SEED),
                       "deadline_scale": float(scale), "fails_on": invariant,
                       "regenerate": f"python3 scripts/golden.py {name}"}, f, indent=1)
            f.write("\n")
    if recorded:
        out = subprocess.run([CHAOSRUN, "judge", staged, "--json"], capture_output=True, text=True)
        if out.returncode not in (0, 1):
            sys.exit(f"judge failed: exit {out.returncode}\n{out.stderr}")
        doc = json.loads(out.stdout)
        for s in doc["scenarios"]:
            name = os.path.basename(s["artifacts"])
            if outcomes(s["checks"]) != outcomes(recorded[name]):
                problems.append(f"{name}: the normalised observation judges differently:\n"
                                f"  run:    {outcomes(recorded[name])}\n  judged: {outcomes(s['checks'])}")
                shutil.rmtree(os.path.join(staged, name))
                continue
            with open(os.path.join(staged, name, "checks.json"), "w") as f:
                json.dump(s["checks"], f, indent=1)
                f.write("\n")
            dest = os.path.join(GOLDEN, name)
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(os.path.join(staged, name), dest)
            print(f"wrote tests/golden/{name}: {s['verdict']}")
    shutil.rmtree(work, ignore_errors=True)
    if problems:
        print("\n".join(["", "NOT WRITTEN:"] + problems), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
