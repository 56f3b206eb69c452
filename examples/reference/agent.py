#!/usr/bin/env python3
"""chaosrun reference agent: a small but real LLM agent loop (Python 3.11, stdlib only).

chaosrun spawns this process, points it at a fault-injecting OpenAI-compatible
provider and judges it from the outside. It is the agent chaosrun ships with: it
passes every seed scenario, and each ``--bug NAME`` option re-introduces exactly
one classic liveness bug so chaosrun's own tests can prove the oracle catches it.

What it does
  * Speaks the chaosrun driver protocol: ``agent.py [--bug NAME]... SPEC_PATH``;
    one JSON event per ``CHAOS `` line on stdout; ``interrupt`` lines on stdin
    interrupt the running turn as Ctrl+C would. Logs go to stderr.
  * Or, with ``--acp`` (and no spec path), the Agent Client Protocol: JSON-RPC
    on stdin/stdout, a session per ``session/new``, a turn per
    ``session/prompt``, ``session/cancel`` as the interrupt, ``session/load``
    after a restart (``acp.py``, a sibling module, owns it; see its docstring).
  * Reads its config from ``$HOME/.refagent/config.json`` (base_url, model,
    stale_timeout, request_timeout, api_max_retries, max_turns, tool_timeout).
    Its API key is read from ``$HOME/.refagent/credentials`` for every request
    (else the config's ``api_key``). A 401 is never retried with the key it
    refused: the agent re-reads the key and retries once if it changed, else
    the turn fails with the error.
  * At start-up asks the provider for its model list (``GET {base_url}/models``;
    ``/v1/models`` on Anthropic's wire, ``/v1beta/models`` on Gemini's), waits
    at most MODELS_TIMEOUT (5 s) for it and goes on without it.
  * Runs a tool loop against the model API with SSE streaming over
    ``http.client``, on one of four wires (``--wire W``, else the spec's or the
    config's ``wire``, else ``openai-chat``): ``openai-chat``
    (``POST {base_url}/chat/completions``), ``openai-responses``
    (``POST {base_url}/responses``), ``anthropic`` (``POST {base_url}/v1/messages``)
    and ``gemini`` (``POST {base_url}/v1beta/models/MODEL:streamGenerateContent``).
    The history is kept (and stored) in one shape, converted per wire for each
    request. The request timeout bounds connect+headers,
    the stale timeout bounds the gap between body bytes; 429/5xx/garbage/stale/
    dropped streams are retried with capped exponential backoff, other 4xx never.
    A retry-after (header, or Gemini's RetryInfo) is waited in full, and one past
    RETRY_AFTER_BUDGET fails the turn at once; a used-up quota (OpenAI
    ``insufficient_quota``, Gemini per-day ``QuotaFailure``, Anthropic's 400)
    is never retried, nor is a reached usage limit (``usage_limit_reached``, or
    a 429 saying "usage limit"): it is surfaced with when it resets.
    Keepalives (SSE comments, ``ping``, ``response.in_progress``)
    do not count as progress: a stream that sends only them for the stale timeout
    is cut. A reply over MAX_REPLY_CHARS of text is a runaway: the turn fails.
    A context-length error makes the agent cut its tool results and retry (at
    most MAX_COMPACTIONS times); if nothing can be cut, the error is surfaced.
  * Offers the tool ``shell`` (``bash -c`` in its own process group, stdin from
    /dev/null, output capped at 50,000 chars, timeout kills the group;
    ``background: true`` starts a registered job), and ``task`` (``prompt``): a
    subagent, a nested tool loop in a thread with its own history and the shell
    tool only, stopped at the tool timeout or the parent's interrupt; and
    ``write_file`` (``path``, ``content``): the whole file written, ``path``
    relative to the working directory (or absolute inside it); over ACP it is
    written through the client (``fs/write_text_file``, see acp.py).
  * Speaks MCP (``mcp_client.py``, a sibling module): every server of the
    config's ``mcp_servers`` (``{NAME: {"command", "args"} | {"url"} | {"sse_url"}}``) is
    started before ``ready`` within a boot timeout (``mcp_boot_timeout``,
    default max(mcp_timeout, 10s); a hang leaves the agent without its tools),
    and its tools are offered as ``mcp_<server>_<tool>`` next to ``shell`` on
    every wire. A call is bounded by ``mcp_timeout`` (default ``tool_timeout``),
    cancelled (``notifications/cancelled``) on timeout or interrupt; a crashed
    server is reconnected at the next call; servers are shut down at close.
  * Keeps a cross-turn breaker: a turn that failed only on stale streams makes
    the next turn be refused without calling the provider (then half-opens).
  * Persists every message to SQLite (``$HOME/.refagent/state.db``, WAL).
  * Records every tool process in the store when it starts (table ``bg_jobs``:
    id, session_id, kind ``bg``/``fg``, pid, pgid, start_ticks = field 22 of
    /proc/PID/stat, started_at, ended, command); a foreground tool's row is
    marked ended when its group is gone, a background job's when close kills it.
  * On close kills background jobs and, as a child subreaper, every remaining
    descendant (including ``setsid`` escapees), then prints ``closed``, exits 0.

Process faults (restart on the same HOME)
  chaosrun may SIGKILL the agent mid-turn and start it again with a new spec
  carrying the same ``session_id`` plus ``"resume": true, "start_turn": K``.
  At startup (before ``ready``) the agent always:
  1. kills what its previous incarnation left behind: every ``bg_jobs`` row of
     the session not marked ended (background jobs and the foreground tool that
     was in flight). The group is SIGKILLed only if the recorded pid still
     exists with the recorded start time (a reused pid is never hit); live
     processes whose pgrp is the recorded pgid (and that started no earlier
     than the job) are killed too, as they were orphaned and re-parented away
     from us. Then the row is marked ended;
  2. reloads the session's messages in order and repairs them: every tool call
     of the last assistant tool-call message without a result gets the
     synthetic result ``interrupted: the agent restarted before this call
     returned; not re-run``, persisted. The call is never re-run;
  3. runs only turns K..len(turns)-1, with their original indices.

Bugs (``--bug NAME``): retry_storm, retry_400, no_stale_timeout,
leaked_background, lost_parallel_result, wedged_after_interrupt, stdin_open,
huge_output_whole, memory_leak, output_copies, output_read_whole, trusts_started_stream, corrupt_store; the MCP bugs mcp_no_timeout, mcp_no_cancel,
mcp_timeout_no_cancel (a timed-out call is forgotten, never cancelled),
mcp_leak_server (close leaves stdio servers running; the descendant sweep
spares them), mcp_drop_error_result (an ``isError`` result never enters the
history), mcp_boot_drop (a server slower than 1.5 s at boot is dropped without
a word), mcp_retry_unauthorized (a 401 at initialize is retried in a loop),
mcp_stale_schema (``tools/list_changed`` ignored: the old schemas stay offered),
mcp_replies_by_arrival (a batch of calls to one stdio server sent at once, its
answers handed out in arrival order, not by JSON-RPC id), mcp_no_reconnect (a
server whose connection was lost, its process gone or its HTTP session
expired, is dropped with its tools for good, silently), mcp_sse_no_deadline (the
legacy HTTP+SSE start-up waits without the boot deadline);
subagent_no_deadline (the ``task`` tool waits for its subagent for ever);
orphan_subagent (a ``task`` tool stopped by its deadline or an interrupt
abandons its subagent, whose loop retries its model call after the parent's
turn ended);
subagent_abandoned_in_call (a ``task`` tool stopped by its deadline or an
interrupt returns at once and leaves its subagent inside its open model call,
which makes no new call); subagent_fails_at_once (the ``task`` tool errors at once, its
subagent never started: an interrupt aimed at the subagent's call never lands);
subagent_no_retry (a subagent's first error reply fails it: an outage while it
works hands the parent a failure instead of its result);
persist_at_turn_end (the store is written only when a turn ends, as Continue
CLI does: a kill aimed at a store write mid-turn never fires);
wait_for_pipe_eof (a foreground call waits for its stdout to close,
past its timeout, so a child that keeps the pipe holds the turn); hangup_ignored
(SIGHUP, its terminal closing, is ignored: the agent runs on; without it a
SIGHUP ends the agent as SIGTERM does, its tools killed first); and the restart bugs:
  * replay_side_effect: an unanswered call is re-run (its command executed
    again, its real output persisted as the result). The re-run happens in the
    worker of the first resumed turn, before that turn's user message (so it is
    interruptible), or before close if no turn is left.
  * orphan_bg_on_restart: stale ``bg`` jobs of the previous incarnation are not
    killed nor marked ended (a stale foreground tool is still killed).
  * lost_result_on_restart: an unanswered call is left without a result, in the
    store and in the history sent to the model.
  * replay_from_zero: ``start_turn`` is ignored; the resumed agent runs every
    turn again from turn 0 (a protocol violation chaosrun must name).
  * resume_rolls_back_turn: the unfinished turn is rolled back to its user
    message (its finished tool steps deleted from the store), not repaired.
  * nonatomic_rewrite: every write to the store first deletes the unfinished
    turn's stored steps (everything after its user message), then re-inserts
    them one autocommit at a time, NONATOMIC_PAUSE seconds apart (a slow disk),
    then adds the new message: a kill aimed at that write leaves a store
    without the turn's finished steps, which the restarted agent never sees.

Transcript bugs (the JSONL transcript of ``"store": "jsonl"`` in config.json,
profile agent-jsonl.yaml; see JsonlStore), each caught by
``store_resumed_past_damage`` on the ``store_damage_*`` rows of
process_faults.yaml:
  * store_resume_stops_at_damage: resume stops at the first damaged line of
    the transcript and cuts it there, silently, losing every intact record
    after it (claude-code #49876); the healthy agent drops only the damaged
    lines, rewrites the transcript with the rest and says what it dropped on
    stderr.
  * store_append_fused: resume drops the damaged lines in memory only, and
    the first append is written straight after whatever the transcript ends
    with, so a torn or NUL-padded tail swallows it (copilot-cli #1864,
    #4098); the healthy agent starts it on a line of its own.

Combination bugs, each invisible to every row of the seed tables (``chaosrun
explore`` finds them): sticky_backoff_interrupt, resend_batch_minus_one,
replay_after_5xx (see KNOWN_BUGS); and the persistence bugs, which show only
under a fault that lasts past one step's retries or spans steps:
nested_retry_after_tool (a retry storm), fallback_no_timeout (a hang),
shared_retry_budget (a give-up with retries left).

Provider failure-class bugs, one per class: ignore_retry_after (backoff),
keepalive_resets_idle (streams that look alive), compaction_loop (context
overflow); see KNOWN_BUGS.

Credential bugs: auth_retry_same_key (a 401 retried with the key it refused),
auth_cached_key (the key read once at start, so a refreshed one is never
seen); see KNOWN_BUGS.

Value-fault bugs (value_faults.yaml: a 200 that is wrong without being an
error): retry_empty_answer (an empty answer's request sent again, the same,
up to 8 times: request_loop); continue_after_length (an answer cut for length
continued with no bound: the call bound); answer_replayed_call (a replayed
tool call answered again: one_result_per_id); invent_call_on_empty_answer (a made-up call for an
empty answer: results_for_issued_ids); run_misnamed_args (the command under a
wrong key run: broken_args_never_ran); hot_reask_empty (an empty answer
re-asked at once: backoff); paste_partial (a cut answer pasted
into its continuation: partial_sent_once); see KNOWN_BUGS.

Shapes from the field: sleep_until_usage_reset (a usage limit waited out
until its reset, an hour: the turn's deadline); outage_wedges_session (an
outage of 30 s or more, even one that clears, leaves the session unusable:
reusability's probe); background_output_in_memory (a background job's output
kept in memory as it streams, not in its log file: memory_growth);
background_output_copied (a background job's output written three times, to
its log, a log of every job's output and a transcript copy: disk_written);
models_list_no_timeout (the model list asked for at start-up waited for
without a timeout: the boot deadline); see KNOWN_BUGS.

Sandbox bugs: sandbox_silent (a tool sandbox that cannot start reported as a
bare exit code, never named); sandbox_generic_error (reported only as
"sandboxed command failed (exit 1)": the sandbox, not the cause);
sandbox_fallback_silent (the command run unsandboxed, and nothing says so);
see KNOWN_BUGS and SANDBOX.

ACP bugs (``--acp`` only; see acp.py): acp_tool_left_in_progress (a completed
tool call's last update stays ``in_progress``), acp_update_after_cancel (an
``agent_message_chunk`` after the cancelled prompt's answer),
acp_cancel_leaves_job (a cancel leaves the running shell command running),
acp_subagent_ignores_cancel (a running ``task`` subagent never hears the
cancel and goes on calling the model), acp_cancel_before_call_breaks (a cancel
before the turn's first model reply leaves every later prompt only queued),
acp_answer_off_by_one (after a cancel each prompt gets the previous turn's
answer), acp_tool_unreported (a tool call that fails is never reported),
acp_no_exit_on_eof (stdin closed does not make it exit), acp_queued_prompt_dropped
(a prompt sent while a turn runs is never answered), acp_permission_unsettled
(a permission request answered ``cancelled`` is waited on forever; the turn
never ends), acp_load_drops_last_turn
(``session/load`` replays the conversation without its last answered turn),
acp_terminal_no_timeout (the client terminal's wait_for_exit is
waited on with no tool timeout), acp_terminal_never_released (the client's
terminal is never released), acp_write_new_file_fails (``write_file`` reads
the file through the client first and takes any error, a missing file's
-32002 included, for a failure: a new file is never written, as Gemini CLI).

Zombie bug: zombie_children (the shell tool probes its shell before each
foreground command with a child whose Popen object is kept and never waited
for, and the orphan reaper passes it by: a zombie until the agent exits;
caught only by ``no_zombie_children``); see KNOWN_BUGS.

Long-session bug: history_copies_per_turn (each turn keeps a full extra copy
of the history, never freed: memory grows per turn, caught only by
``memory_per_turn`` on long_session_tool_output); see KNOWN_BUGS.

Behaviours (not bugs), each its own option:
  * ``--spill-tool-output[=N]`` (N defaults to SPILL_OVER): a shell output over
    N chars is written whole to a file under ``$HOME/.refagent/spill/`` and the
    model gets an excerpt (its first SPILL_EXCERPT chars) naming the file, as
    mistral-vibe does: a large output never reaches the model whole, so the
    context window is never pushed over (``context_overflow_tool_output``
    passes it as an overflow avoided).
  * ``--engine-child``: each foreground shell command runs under an engine
    process of the agent's own (a helper that allocates 64 MB and marks itself
    the OOM killer's first pick, as an app server or code-execution engine of
    a real agent is), so the agent's memory growth is in a child process; a
    command whose engine the kernel killed fails with a result that says so,
    and the turn goes on (see ENGINE).
"""

import copy
import ctypes
import http.client
import json
import os
import secrets
import select
import shlex
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse

# The MCP client sits beside this file (also when run by runpy or imported).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_client  # noqa: E402

KNOWN_BUGS = {
    "retry_storm": "transient errors retried 60 times with no backoff",
    "retry_400": "HTTP 400 treated as transient",
    "no_stale_timeout": "no stale timeout while streaming",
    "leaked_background": "close leaves background jobs and descendants running",
    "lost_parallel_result": "every result of a parallel batch carries the first call's output",
    "wedged_after_interrupt": "the interrupt flag is never cleared",
    "stdin_open": "tools inherit the agent's stdin",
    "huge_output_whole": "tool output is not capped",
    "trusts_started_stream": "once a response head arrived, its stream has no read timeout (a stream that started is trusted to finish)",
    "memory_leak": "every tool output is kept whole in memory four times (raw bytes, text, the transcript log line, the rendered view), never trimmed",
    "output_copies": "every tool output is kept whole in memory three times (raw bytes, text, the transcript line), never trimmed",
    "history_copies_per_turn": "each turn keeps a full extra copy of the conversation's history, never freed: memory grows with every turn",
    "output_read_whole": "a tool's whole output is read into memory (bytes, text, lines) before it is cut to the cap",
    "corrupt_store": "state.db is corrupted at close",
    "replay_side_effect": "on resume, an unanswered tool call is re-run",
    "orphan_bg_on_restart": "on resume, the previous incarnation's background jobs are left running",
    "lost_result_on_restart": "on resume, an unanswered tool call is left without a result",
    "replay_from_zero": "on resume, start_turn is ignored and the turns replay from turn 0",
    "resume_rolls_back_turn": "on resume, an unfinished turn is rolled back to its user message: the tool calls and results it had persisted are deleted",
    "store_resume_stops_at_damage": "JSONL transcript: resume stops at the first damaged line and cuts the transcript there, silently dropping the intact records after it",
    "store_append_fused": "JSONL transcript: resume leaves a damaged transcript as it is and the first append does not start on a line of its own (it fuses onto a torn or NUL-padded tail)",
    "nonatomic_rewrite": "every store write deletes the unfinished turn's stored steps, then re-inserts them one slow autocommit at a time: a kill in between leaves the store short",
    "mcp_no_timeout": "an MCP tool call has no timeout (waits until interrupted)",
    "mcp_no_cancel": "an abandoned MCP call is never cancelled (no notifications/cancelled)",
    "mcp_timeout_no_cancel": "an MCP call whose timeout fires is forgotten: no notifications/cancelled, the connection kept open",
    "mcp_leak_server": "close never stops the stdio MCP servers",
    "mcp_drop_error_result": "an MCP result marked isError is dropped from the history",
    "mcp_boot_drop": "an MCP server not ready within 1.5 s is dropped silently (no tools, nothing said)",
    "mcp_retry_unauthorized": "an MCP server's HTTP 401 at initialize is retried until the boot timeout",
    "mcp_stale_schema": "notifications/tools/list_changed is ignored: the model keeps the old tool schemas",
    "mcp_replies_by_arrival": "a batch of calls to one stdio MCP server is sent at once and the answers are handed to the calls in the order they arrive, not by JSON-RPC id",
    "mcp_no_reconnect": "an MCP server whose connection was lost (its process gone, its HTTP session expired) is dropped with its tools for the rest of the session, without a word",
    "mcp_sse_no_deadline": "over the legacy HTTP+SSE transport, start-up waits for the endpoint event and the answers to initialize and tools/list without the boot deadline",
    "subagent_no_deadline": "the task tool waits for its subagent with no deadline",
    "orphan_subagent": "a stopped task tool abandons its subagent, which keeps calling the model after the parent's turn ended",
    "subagent_abandoned_in_call": "a stopped task tool returns at once and leaves its subagent inside its open model call, after the parent's turn ended",
    "subagent_fails_at_once": "the task tool fails at once, without starting its subagent",
    "subagent_no_retry": "a subagent's model call is never retried: its first error reply fails the subagent, whose failure becomes the task tool's result",
    # Persistence at turn end (issue 47.8: a kill aimed at a store write never fires).
    "persist_at_turn_end": "nothing is written to the store while a turn runs: its messages and tool jobs are written when it ends",
    # Tools that hold the pipe.
    "wait_for_pipe_eof": "a foreground call returns only at stdout EOF (no grace, no timeout once the command exited)",
    # Combination bugs (chaosrun explore): each needs two faults together.
    "sticky_backoff_interrupt": "an interrupt that lands while a retryable error is handled (read, backoff) stays set and kills the next turn",
    "resend_batch_minus_one": "a 429 right after a parallel batch re-sends the batch with its last result missing",
    "replay_after_5xx": "a 5xx on the call right after a single tool call's result re-runs that tool call",
    # Provider failure classes (issue 19): backoff, streams that look alive, context overflow.
    "ignore_retry_after": "a retry-after from the provider is ignored; only the agent's own short backoff applies",
    "keepalive_resets_idle": "keepalives (SSE comments, pings, in-progress events) reset the stall timer, so a content-less stream is never cut",
    "compaction_loop": "a context-length error triggers a compaction that cannot shrink the request, retried again and again",
    # Persistence bugs (chaosrun explore v2): each needs a fault that lasts, or
    # faults on two steps of one turn; no row of the seed tables shows one.
    "nested_retry_after_tool": "after a tool result, a model call that failed all its retries is retried again by the turn loop (retries nest)",
    "fallback_no_timeout": "after a tool result, the last-chance retry opens a fallback connection without the request timeout",
    "shared_retry_budget": "the retry counter is kept per turn, not per model call: earlier steps' errors use up later steps' retries",
    # Credentials that expire mid-run (issue 35.1).
    "auth_retry_same_key": "a 401 is retried with the key it refused until the retries run out",
    "auth_cached_key": "the API key is read once at start and never again (a refreshed key is never seen)",
    # Value faults (value_faults.yaml, issue 46).
    "retry_empty_answer": "an empty answer (no text, no tool calls) is asked for again with the same request, up to 8 times (0.2 s apart)",
    "hot_reask_empty": "an empty answer is asked for again once, at once, with the same request: no backoff",
    # Shapes from the field (issue 44.8).
    "sleep_until_usage_reset": "a usage limit is waited out: the agent sleeps until its reset (an hour), then retries",
    "background_output_in_memory": "a background job's output is read through a pipe and kept in memory, all of it, as it streams (not written to the job's log file)",
    "models_list_no_timeout": "the provider's model list, asked for at start-up, is waited for without a timeout (a list that never comes holds the start-up for ever)",
    "background_output_copied": "a background job's output is written three times: to the job's own log and, through tee, to a log of every job's output and to the session's transcript copy (~/.refagent/bg/all-jobs.log, session-output.log)",
    "outage_wedges_session": "provider errors that go on for 30 s or more mark the session's connection lost: the turn fails and every later turn fails at once, without calling the provider, though the outage cleared",
    "continue_after_length": "an answer cut for length is continued ('Continue.') again and again, up to 20 times, with no bound of its own",
    "answer_replayed_call": "a replayed tool call (an id already answered) is kept and answered again with an error result: two results for one id",
    "invent_call_on_empty_answer": "an answer with no text and no tool calls is taken for a lost tool call: a made-up call and its error result are added (once a turn)",
    "paste_partial": "the continuation after an answer cut for length pastes the partial answer into its request again ('Continue from: ...'): the cut text sent twice",
    "run_misnamed_args": "a shell call without `command` runs the string under any key that holds 'command' (command_text): broken arguments run",
    # The agent's own sandbox nested in chaosrun's (issue 35.5).
    "sandbox_silent": "a tool sandbox that cannot start is reported as the command's bare exit code: the result never says the sandbox failed",
    "sandbox_generic_error": "a tool sandbox that cannot start is reported as 'sandboxed command failed (exit 1)': the sandbox is named, the cause is not",
    "sandbox_fallback_silent": "a tool sandbox that cannot start is skipped: the command runs unsandboxed and nothing says so",
    # ACP mode (acp.py, issue 43): each only changes what `--acp` does.
    "acp_tool_left_in_progress": "ACP: a tool call that completed never gets its `completed` update; its last update stays `in_progress`",
    "acp_update_after_cancel": "ACP: an agent_message_chunk is sent after the cancelled prompt was answered",
    "acp_cancel_leaves_job": "ACP: a cancel ends the turn `cancelled` at once and leaves the running shell command running",
    "hangup_ignored": "SIGHUP is ignored: the agent runs on after its terminal closed",
    "acp_subagent_ignores_cancel": "ACP: a cancel stops the parent's turn but the running `task` subagent is never told and goes on calling the model",
    "acp_cancel_before_call_breaks": "ACP: a cancel before the turn's first model call is answered leaves the session busy; every later prompt is only queued, never run",
    "acp_answer_off_by_one": "ACP: after a cancelled prompt each prompt is answered with the previous turn's answer",
    "acp_tool_unreported": "ACP: a tool call that fails (an error, a non-zero exit) sends no `tool_call` update at all",
    "acp_no_exit_on_eof": "ACP: stdin closed does not make the agent exit; only a signal ends it",
    "acp_queued_prompt_dropped": "ACP: a session/prompt that arrives while a turn runs is dropped: never answered, never run",
    "acp_permission_unsettled": "ACP: a session/request_permission answered `cancelled` is ignored and waited on forever, so the cancelled turn never ends",
    "acp_load_drops_last_turn": "ACP: session/load replays the conversation without its last answered turn",
    "acp_terminal_no_timeout": "ACP: terminal/wait_for_exit on the client's terminal is waited on with no tool timeout",
    "acp_terminal_never_released": "ACP: the client's terminal is never released (terminal/release)",
    "acp_write_new_file_fails": "ACP: write_file reads the file through the client first and takes any error, a missing file's -32002 included, for a failure: a new file is never written (Gemini CLI)",
    "acp_queue_lost_on_kill": "ACP: a prompt queued while a turn runs is persisted at once; after a kill and session/load, the prompt sent again is taken for that kept copy and never answered",
    # Children left unreaped (issue 43.6, claude-code #58000).
    "zombie_children": "before each foreground command the shell tool probes its shell (bash --version) with a child it never waits for, which the orphan reaper passes by: a zombie until the agent exits",
}

# The tool sandbox (config "sandbox": true): each shell command runs in a user
# namespace (mapped to root) with a network namespace of its own (no network),
# so it can write the workdir and nothing else reaches the outside. Nested in a
# sandbox that denies namespaces (a container's seccomp profile) it cannot
# start; the command is then not run and the result says why.
SANDBOX = ["unshare", "--user", "--map-root-user", "--net", "--fork"]

OUTPUT_CAP = 50_000          # chars of tool output kept (bytes read, decoded)
SPILL_OVER = 16_000          # --spill-tool-output: outputs longer than this go to a file
SPILL_EXCERPT = 2_000        # --spill-tool-output: chars of a spilled output the model gets
# The gate every tool process starts behind: wait for "go" on an inherited pipe,
# then become `bash -c COMMAND` (same pid, same process group). EOF (the agent
# died before recording the process) means the command never runs.
GATE = 'IFS= read -r go <&{fd}; exec {fd}<&-; [ "$go" = go ] || exit 125; exec bash -c "$1"'
# --engine-child: the engine a foreground command runs under. It raises its
# own oom_score_adj (so the kernel kills it, not the agent, when the agent's
# processes are out of memory), allocates 64 MB, then runs the command with
# PR_SET_PDEATHSIG (a killed engine takes its command with it).
ENGINE = ("import ctypes, subprocess, sys\n"
          "open('/proc/self/oom_score_adj', 'w').write('500')\n"
          "held = [b'e' * (1 << 20) for _ in range(64)]\n"
          "libc = ctypes.CDLL(None)\n"
          "rc = subprocess.call(['bash', '-c', sys.argv[1]], preexec_fn=lambda: libc.prctl(1, 9))\n"
          "sys.exit(rc if rc >= 0 else 128 - rc)\n")
ENGINE_CHILD = False   # set by --engine-child
PERSIST_CAP = 1_000_000      # hard cap on one persisted content
RETRY_AFTER_BUDGET = 30.0   # a retry-after longer than this fails the turn at once, surfaced
MODELS_TIMEOUT = 5.0        # the model list at start-up is waited for at most this long
MAX_REPLY_CHARS = 200_000   # a reply longer than this is a runaway model: the turn fails, not retried
COMPACT_TOOL_CHARS = 1_000  # on a context-length error, tool results are cut to this many chars
MAX_COMPACTIONS = 2         # compactions per model call before the overflow is surfaced
BACKOFF_START = 0.2
BACKOFF_CAP = 2.0
OUTAGE_WEDGE_AFTER = 30.0   # --bug outage_wedges_session: seconds of failing calls that lose the session
PR_SET_CHILD_SUBREAPER = 36
INTERRUPTED_FINAL = "interrupted by user"
RESTART_RESULT = "interrupted: the agent restarted before this call returned; not re-run"
BREAKER_FINAL = "refused: provider circuit open after repeated stale streams"
SYSTEM_PROMPT = ("You are a small command-line agent. Use the shell tool to run commands "
                 "in the working directory when that helps; answer concisely.")

SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a bash command in the working directory and return its output.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash command to run."},
                "timeout": {"type": "number", "description": "Seconds before the command is killed."},
                "background": {"type": "boolean",
                               "description": "Start the command as a background job and return at once."},
            },
            "required": ["command"],
        },
    },
}

SUBAGENT_TOOL = {
    "type": "function",
    "function": {
        "name": "task",
        "description": ("Hand a self-contained task to a subagent (its own tool loop with the shell "
                        "tool, bounded by the tool timeout) and return its final answer."),
        "parameters": {
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "The task for the subagent."}},
            "required": ["prompt"],
        },
    },
}

WRITE_TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a whole text file in the working directory (created or replaced).",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file's path, relative to the working directory."},
                "content": {"type": "string", "description": "The file's whole new content."},
            },
            "required": ["path", "content"],
        },
    },
}

WIRES = ("openai-chat", "openai-responses", "anthropic", "gemini")
# Stream events that only say "still here" (SSE comment lines never reach the
# parser): they must not reset the stall timer.
KEEPALIVE_EVENTS = ("ping", "response.created", "response.in_progress")


# ---------------------------------------------------------------- wires
# The history is chat-shaped ({"role", "content", "tool_calls": [{"id",
# "function": {"name", "arguments"}}]}, {"role": "tool", "tool_call_id"});
# each wire's request is built from it, and each wire's stream is read back
# into (text, tool calls) by a handler fed one SSE event at a time.

def args_object(raw):
    """Tool arguments as the object Anthropic and Gemini want ({} if not one)."""
    try:
        v = json.loads(raw) if (raw or "").strip() else {}
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def call_names(history):
    """Tool call id -> tool name, over the history."""
    names = {}
    for m in history:
        for tc in m.get("tool_calls") or []:
            names[tc.get("id")] = (tc.get("function") or {}).get("name") or ""
    return names


def merge_same_role(msgs):
    """Consecutive messages of one role become one (their content blocks joined)."""
    out = []
    for m in msgs:
        key = "parts" if "parts" in m else "content"
        if out and out[-1]["role"] == m["role"]:
            out[-1][key] = out[-1][key] + m[key]
        else:
            out.append(m)
    return out


def wire_request(wire, model, history, tools=None, system=SYSTEM_PROMPT):
    """(path suffix, body) of one streaming request on `wire`, offering `tools`
    (chat-style function specs; default: the shell tool alone)."""
    tools = tools or [SHELL_TOOL]
    fns = [t["function"] for t in tools]
    if wire == "openai-chat":
        return "/chat/completions", {
            "model": model, "stream": True, "tools": tools,
            "messages": [{"role": "system", "content": system}] + history}
    if wire == "openai-responses":
        items = []
        for m in history:
            if m["role"] == "tool":
                items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"),
                              "output": m.get("content") or ""})
            elif m["role"] == "assistant":
                if m.get("content"):
                    items.append({"type": "message", "role": "assistant",
                                  "content": [{"type": "output_text", "text": m["content"]}]})
                for tc in m.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    items.append({"type": "function_call", "call_id": tc.get("id"),
                                  "name": fn.get("name") or "", "arguments": fn.get("arguments") or ""})
            else:
                items.append({"role": m["role"], "content": m.get("content") or ""})
        return "/responses", {
            "model": model, "stream": True, "store": False, "instructions": system,
            "input": items,
            "tools": [{"type": "function", "name": f["name"], "description": f["description"],
                       "parameters": f["parameters"]} for f in fns]}
    if wire == "anthropic":
        msgs = []
        for m in history:
            if m["role"] == "tool":
                msgs.append({"role": "user", "content": [{
                    "type": "tool_result", "tool_use_id": m.get("tool_call_id"),
                    "content": m.get("content") or ""}]})
            elif m["role"] == "assistant":
                blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
                for tc in m.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    blocks.append({"type": "tool_use", "id": tc.get("id"), "name": fn.get("name") or "",
                                   "input": args_object(fn.get("arguments"))})
                msgs.append({"role": "assistant", "content": blocks or [{"type": "text", "text": ""}]})
            else:
                msgs.append({"role": "user", "content": [{"type": "text", "text": m.get("content") or ""}]})
        return "/v1/messages", {
            "model": model, "max_tokens": 4096, "stream": True, "system": system,
            "messages": merge_same_role(msgs),
            "tools": [{"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
                      for f in fns]}
    if wire == "gemini":
        names = call_names(history)
        contents = []
        for m in history:
            if m["role"] == "tool":
                cid = m.get("tool_call_id")
                contents.append({"role": "user", "parts": [{"functionResponse": {
                    "id": cid, "name": names.get(cid, ""), "response": {"output": m.get("content") or ""}}}]})
            elif m["role"] == "assistant":
                parts = [{"text": m["content"]}] if m.get("content") else []
                for tc in m.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    parts.append({"functionCall": {"id": tc.get("id"), "name": fn.get("name") or "",
                                                   "args": args_object(fn.get("arguments"))}})
                contents.append({"role": "model", "parts": parts or [{"text": ""}]})
            else:
                contents.append({"role": "user", "parts": [{"text": m.get("content") or ""}]})
        path = "/v1beta/models/" + urllib.parse.quote(model, safe="") + ":streamGenerateContent?alt=sse"
        return path, {
            "systemInstruction": {"parts": [{"text": system}]},
            "contents": merge_same_role(contents),
            "tools": [{"functionDeclarations": [{"name": f["name"], "description": f["description"],
                                                 "parameters": f["parameters"]} for f in fns]}]}
    raise ValueError(f"unknown wire {wire!r}")


def models_path(wire):
    """The model list's path on `wire`, after the base URL's own path."""
    return {"anthropic": "/v1/models", "gemini": "/v1beta/models"}.get(wire, "/models")


def wire_headers(wire, api_key):
    h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if wire == "anthropic":
        h.update({"x-api-key": api_key, "anthropic-version": "2023-06-01"})
    elif wire == "gemini":
        h["x-goog-api-key"] = api_key
    else:
        h["Authorization"] = f"Bearer {api_key}"
    return h


def error_object(body):
    """The ``error`` object of an error body, any wire (None: no such object)."""
    try:
        err = json.loads(body).get("error")
    except Exception:
        return None
    return err if isinstance(err, dict) else None


def error_detail(err):
    """(message, retry-after seconds from the body, final) of an error object
    (``error_object``). ``final`` marks a quota that is used up (OpenAI
    ``insufficient_quota``, a Gemini ``QuotaFailure`` on a per-day quota):
    retrying cannot help."""
    if err is None:
        return None, None, False
    retry = None
    final = "insufficient_quota" in (err.get("code"), err.get("type"))
    for d in err.get("details") or []:
        if not isinstance(d, dict):
            continue
        delay = d.get("retryDelay")   # Gemini: google.rpc.RetryInfo
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                retry = max(0.0, float(delay[:-1]))
            except ValueError:
                pass
        if str(d.get("@type", "")).endswith("google.rpc.QuotaFailure"):
            for v in d.get("violations") or []:
                if isinstance(v, dict) and "PerDay" in str(v.get("quotaId", "")):
                    final = True
    return err.get("message"), retry, final


def usage_reset(status, err, retry_after):
    """Seconds until a reached usage limit resets, or None when the error
    object (``error_object``) is no usage limit: the ChatGPT backend's
    ``usage_limit_reached`` (its ``resets_in_seconds``), or a 429 whose
    message says "usage limit" (its retry-after)."""
    if err is None:
        return None
    if err.get("type") == "usage_limit_reached":
        secs = err.get("resets_in_seconds")
        return float(secs) if isinstance(secs, (int, float)) else retry_after
    if status == 429 and "usage limit" in str(err.get("message", "")).lower():
        return retry_after
    return None


def is_context_error(status, message):
    """A context-length error, as each wire words it."""
    m = (message or "").lower()
    return status == 400 and ("context length" in m or "context_length_exceeded" in m
                              or "prompt is too long" in m or "input token count" in m)


class StreamState:
    """What one streamed reply has given so far."""

    def __init__(self):
        self.text = []
        self.calls = {}
        self.finished = False   # the reply said it is complete
        self.done = False       # nothing more will come
        self.chars = 0          # text chars so far (the runaway cap)
        self.reason = None      # the finish, in Chat terms ("length", ...), when the reply gave one


def stream_error(obj):
    return f"error in stream: {json.dumps(obj.get('error') or obj.get('response', {}).get('error') or obj)[:200]}"


def handle_event(wire, st, event, obj, merge_tool_call):
    """Feed one SSE event (its `event:` name and its JSON data) to `st`.
    Raises ValueError for an error event (the caller makes it a ProviderError)."""
    if wire == "openai-chat":
        if obj.get("error"):
            raise ValueError(stream_error(obj))
        for ch in obj.get("choices") or []:
            if not isinstance(ch, dict):
                continue
            delta = ch.get("delta") or {}
            if isinstance(delta.get("content"), str):
                st.text.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                merge_tool_call(st.calls, tc)
            if ch.get("finish_reason"):
                st.finished = True
                st.reason = ch["finish_reason"]
        return
    kind = obj.get("type") or event
    if wire == "openai-responses":
        item = obj.get("item") if isinstance(obj.get("item"), dict) else {}
        idx = obj.get("output_index")
        if kind == "response.output_text.delta":
            st.text.append(obj.get("delta") or "")
        elif kind == "response.output_item.added" and item.get("type") == "function_call":
            st.calls[idx] = {"id": item.get("call_id") or "", "name": item.get("name") or "", "arguments": ""}
        elif kind == "response.function_call_arguments.delta" and idx in st.calls:
            st.calls[idx]["arguments"] += obj.get("delta") or ""
        elif kind in ("response.completed", "response.incomplete"):
            st.finished = st.done = True
            details = (obj.get("response") or {}).get("incomplete_details") or {}
            st.reason = "length" if details.get("reason") == "max_output_tokens" else details.get("reason")
        elif kind in ("response.failed", "error"):
            raise ValueError(stream_error(obj))
        return
    if wire == "anthropic":
        idx = obj.get("index")
        if kind == "content_block_start":
            block = obj.get("content_block") or {}
            if block.get("type") == "tool_use":
                st.calls[idx] = {"id": block.get("id") or "", "name": block.get("name") or "", "arguments": ""}
        elif kind == "content_block_delta":
            d = obj.get("delta") or {}
            if d.get("type") == "text_delta":
                st.text.append(d.get("text") or "")
            elif d.get("type") == "input_json_delta" and idx in st.calls:
                st.calls[idx]["arguments"] += d.get("partial_json") or ""
        elif kind == "message_delta":
            stop = (obj.get("delta") or {}).get("stop_reason")
            if stop:
                st.finished = True
                st.reason = "length" if stop == "max_tokens" else stop
        elif kind == "message_stop":
            st.finished = st.done = True
        elif kind == "error":
            raise ValueError(stream_error(obj))
        return
    if wire == "gemini":
        if obj.get("error"):
            raise ValueError(stream_error(obj))
        for cand in obj.get("candidates") or []:
            for part in ((cand.get("content") or {}).get("parts") or []):
                if isinstance(part.get("text"), str) and not part.get("thought"):
                    st.text.append(part["text"])
                fc = part.get("functionCall")
                if isinstance(fc, dict):
                    args = fc.get("args")
                    st.calls[len(st.calls)] = {
                        "id": fc.get("id") or "", "name": fc.get("name") or "",
                        "arguments": args if isinstance(args, str) else json.dumps(args or {})}
            if cand.get("finishReason"):
                st.finished = True
                st.reason = "length" if cand["finishReason"] == "MAX_TOKENS" else cand["finishReason"]
        return


def whole_reply(wire, obj):
    """(text, [(id, name, arguments)]) of a non-streaming reply; raises on a bad shape."""
    calls = []
    if wire == "openai-chat":
        msg = obj["choices"][0]["message"]
        for tc in msg.get("tool_calls") or []:
            fn = tc.get("function") or {}
            args = fn.get("arguments")
            calls.append((tc.get("id"), fn.get("name"), args if isinstance(args, str) else json.dumps(args)))
        return msg.get("content") or "", calls
    if wire == "openai-responses":
        text = []
        for item in obj["output"]:
            if item.get("type") == "message":
                text += [c.get("text") or "" for c in item.get("content") or []]
            elif item.get("type") == "function_call":
                calls.append((item.get("call_id"), item.get("name"), item.get("arguments") or ""))
        return "".join(text), calls
    if wire == "anthropic":
        text = []
        for b in obj["content"]:
            if b.get("type") == "text":
                text.append(b.get("text") or "")
            elif b.get("type") == "tool_use":
                inp = b.get("input")
                calls.append((b.get("id"), b.get("name"), inp if isinstance(inp, str) else json.dumps(inp)))
        return "".join(text), calls
    text = []
    for part in obj["candidates"][0]["content"]["parts"]:
        if isinstance(part.get("text"), str) and not part.get("thought"):
            text.append(part["text"])
        fc = part.get("functionCall")
        if isinstance(fc, dict):
            args = fc.get("args")
            calls.append((fc.get("id"), fc.get("name"), args if isinstance(args, str) else json.dumps(args or {})))
    return "".join(text), calls


def log(msg):
    try:
        sys.stderr.write(f"[refagent {time.strftime('%H:%M:%S')}] {msg}\n")
        sys.stderr.flush()
    except Exception:
        pass


def fmt_num(x):
    return "%g" % x


_emit_lock = threading.Lock()


def emit(ev):
    line = "CHAOS " + json.dumps(ev) + "\n"
    with _emit_lock:
        try:
            sys.stdout.write(line)
            sys.stdout.flush()
        except Exception:
            pass



def row_to_message(role, content, tool_call_id, tool_calls):
    """A stored (role, content, tool_call_id, tool_calls JSON) row as a wire message."""
    m = {"role": role, "content": content}
    if tool_call_id is not None:
        m["tool_call_id"] = tool_call_id
    if tool_calls:
        try:
            m["tool_calls"] = json.loads(tool_calls)
        except ValueError:
            pass
    return m

class Interrupted(Exception):
    pass


class ProviderError(Exception):
    """One failed model-call attempt. kind: stale, dropped, garbage, timeout, connect, http."""

    def __init__(self, kind, transient, msg, retry_after=None, context=False, key=None):
        super().__init__(msg)
        self.key = key           # a 401: the API key the refused request carried
        self.kind = kind
        self.transient = transient
        self.msg = msg
        self.retry_after = retry_after
        self.context = context   # the request is over the model's context window


class TurnFailed(Exception):
    def __init__(self, msg, all_stale):
        super().__init__(msg)
        self.msg = msg
        self.all_stale = all_stale


# ---------------------------------------------------------------- process tree

def proc_table(with_pgrp=False):
    """{pid: (ppid, state)} (or (ppid, state, pgrp)) for every process in /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2:].split()
        if len(rest) < 2:
            continue
        try:
            entry = (int(rest[1]), rest[0].decode())
            table[int(name)] = entry + (int(rest[2]),) if with_pgrp else entry
        except (ValueError, IndexError):
            continue
    return table


def proc_stat(pid):
    """(state, pgrp, start_ticks) of a process from /proc/PID/stat, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()
    try:
        # rest[0] is field 3 (state): pgrp is field 5, starttime field 22.
        return rest[0].decode(), int(rest[2]), int(rest[19])
    except (ValueError, IndexError):
        return None


def proc_start_ticks(pid):
    st = proc_stat(pid)
    return st[2] if st else None


def descendants_of(root, table):
    children = {}
    for pid, entry in table.items():
        children.setdefault(entry[0], []).append(pid)
    out, stack = [], [root]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def reap_all():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def killpg_quiet(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- store

class Store:
    """SQLite message store, one row per message, written as it happens."""

    def __init__(self, path, cap=PERSIST_CAP):
        self.path = path
        self.cap = cap       # None: persist contents whole (bug huge_output_whole)
        self.lock = threading.Lock()
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS messages("
            " id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " session_id TEXT NOT NULL,"
            " role TEXT NOT NULL,"
            " content TEXT,"
            " tool_call_id TEXT,"
            " tool_calls TEXT,"
            " active INTEGER NOT NULL DEFAULT 1,"
            " created_at REAL)")
        self.db.execute("CREATE INDEX IF NOT EXISTS messages_session ON messages(session_id, id)")
        self.db.execute("CREATE INDEX IF NOT EXISTS messages_created_at ON messages(created_at)")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS bg_jobs("
            " id TEXT PRIMARY KEY,"
            " session_id TEXT NOT NULL,"
            " kind TEXT NOT NULL DEFAULT 'bg',"
            " pid INTEGER,"
            " pgid INTEGER,"
            " start_ticks INTEGER,"
            " started_at REAL,"
            " ended INTEGER NOT NULL DEFAULT 0,"
            " command TEXT)")

    def add_job(self, job_id, session_id, kind, pid, pgid, start_ticks, command):
        with self.lock:
            self.db.execute(
                "INSERT OR REPLACE INTO bg_jobs(id, session_id, kind, pid, pgid, start_ticks, started_at,"
                " ended, command) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)",
                (job_id, session_id, kind, pid, pgid, start_ticks, time.time(), command[:2000]))

    def end_job(self, job_id):
        with self.lock:
            self.db.execute("UPDATE bg_jobs SET ended = 1 WHERE id = ?", (job_id,))

    def open_jobs(self, session_id):
        with self.lock:
            return self.db.execute(
                "SELECT id, kind, pid, pgid, start_ticks FROM bg_jobs"
                " WHERE session_id = ? AND ended = 0 ORDER BY started_at", (session_id,)).fetchall()

    def load(self, session_id):
        with self.lock:
            rows = self.db.execute(
                "SELECT role, content, tool_call_id, tool_calls FROM messages"
                " WHERE session_id = ? AND active = 1 ORDER BY id", (session_id,)).fetchall()
        return [row_to_message(*r) for r in rows]

    def add(self, session_id, msg):
        content = msg.get("content")
        if self.cap is not None and isinstance(content, str) and len(content) > self.cap:
            content = content[:self.cap - 100] + "\n[truncated for storage]"
        tool_calls = msg.get("tool_calls")
        with self.lock:
            self.db.execute(
                "INSERT INTO messages(session_id, role, content, tool_call_id, tool_calls, active, created_at)"
                " VALUES (?, ?, ?, ?, ?, 1, ?)",
                (session_id, msg["role"], content, msg.get("tool_call_id"),
                 json.dumps(tool_calls) if tool_calls else None, time.time()))

    def truncate_after(self, session_id, keep):
        """Delete the session's active messages after its first ``keep``."""
        with self.lock:
            self.db.execute(
                "DELETE FROM messages WHERE session_id = ? AND active = 1 AND id NOT IN"
                " (SELECT id FROM messages WHERE session_id = ? AND active = 1 ORDER BY id LIMIT ?)",
                (session_id, session_id, keep))

    def index_root(self, name):
        with self.lock:
            row = self.db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def close(self):
        with self.lock:
            try:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as e:
                log(f"checkpoint failed: {e}")
            self.db.close()


class JsonlStore(Store):
    """Messages in a JSONL transcript, one record (the wire message) a line,
    appended as they happen (``"store": "jsonl"`` in config.json, profile
    agent-jsonl.yaml); state.db beside it keeps the background jobs.

    Resume is robust to a transcript damaged by power loss or a second
    writer: a line that is not a message record is dropped, and a record
    identical to the one before it (a writer's retry) kept once; the
    transcript is then rewritten with the records kept (atomically), and
    what was dropped said on stderr; the first append starts on a line of
    its own whatever the transcript ends with. --bug
    store_resume_stops_at_damage cuts the transcript at the first damaged
    line, silently; --bug store_append_fused leaves the transcript as it is
    and appends straight after its tail."""

    def __init__(self, path, cap=PERSIST_CAP, transcript=None, bugs=()):
        super().__init__(path, cap)
        self.transcript = transcript
        self.bugs = bugs
        self.tail_checked = "store_append_fused" in bugs
        os.makedirs(os.path.dirname(transcript), exist_ok=True)

    def load(self, session_id):
        try:
            with open(self.transcript, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        msgs, kept, dropped, repeats, at = [], [], [], 0, 0
        for n, line in enumerate(data.split(b"\n"), 1):
            here, at = at, at + len(line) + 1
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict) or not isinstance(rec.get("role"), str):
                    raise ValueError("not a message record")
            except ValueError:
                if "store_resume_stops_at_damage" in self.bugs:
                    # Silently cut the transcript where the damage starts.
                    with open(self.transcript, "r+b") as f:
                        f.truncate(here)
                    return msgs
                dropped.append(n)
                continue
            if kept and line == kept[-1]:
                repeats += 1
                continue
            kept.append(line)
            msgs.append(rec)
        if (dropped or repeats) and "store_append_fused" not in self.bugs:
            # Repair: the intact records, each on its line, written whole
            # beside the transcript and renamed over it.
            tmp = self.transcript + ".repair"
            with open(tmp, "wb") as f:
                f.write(b"".join(line + b"\n" for line in kept))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.transcript)
            log(f"transcript {self.transcript}: dropped {len(dropped)} damaged line(s)"
                f" {dropped[:10]} and {repeats} repeated record(s); kept {len(msgs)} message(s)")
        return msgs

    def add(self, session_id, msg):
        content = msg.get("content")
        if self.cap is not None and isinstance(content, str) and len(content) > self.cap:
            content = content[:self.cap - 100] + "\n[truncated for storage]"
        rec = {"role": msg["role"], "content": content}
        for key in ("tool_call_id", "tool_calls"):
            if msg.get(key):
                rec[key] = msg[key]
        line = (json.dumps(rec) + "\n").encode()
        with self.lock:
            with open(self.transcript, "ab+") as f:
                if not self.tail_checked:
                    self.tail_checked = True
                    if f.seek(0, os.SEEK_END) > 0:
                        f.seek(-1, os.SEEK_END)
                        if f.read(1) != b"\n":
                            log(f"transcript {self.transcript}: its tail ends mid-line; the next record starts a new line")
                            line = b"\n" + line
                f.write(line)

    def truncate_after(self, session_id, keep):
        msgs = self.load(session_id)[:keep]
        tmp = self.transcript + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join((json.dumps(m) + "\n").encode() for m in msgs))
        os.replace(tmp, self.transcript)


# --bug nonatomic_rewrite: the pause before each re-inserted row (seconds).
NONATOMIC_PAUSE = 1.0


class NonAtomicStore(Store):
    """--bug nonatomic_rewrite: a store that rewrites the unfinished turn on
    every write, without a transaction: the turn's stored steps (the rows
    after its last user message) are deleted in one autocommit, re-inserted
    one autocommit at a time NONATOMIC_PAUSE seconds apart, then the new
    message is added. A kill in between leaves them deleted."""

    def add(self, session_id, msg):
        with self.lock:
            rows = self.db.execute(
                "SELECT id, role, content, tool_call_id, tool_calls, created_at FROM messages"
                " WHERE session_id = ? AND active = 1 AND id > COALESCE((SELECT MAX(id) FROM messages"
                "  WHERE session_id = ? AND active = 1 AND role = 'user'), 0) ORDER BY id",
                (session_id, session_id)).fetchall()
            if rows:
                self.db.execute("DELETE FROM messages WHERE id IN (%s)" % ",".join("?" * len(rows)),
                                [r[0] for r in rows])
                log(f"rewriting {len(rows)} stored step(s) of the turn (bug nonatomic_rewrite)")
            for _id, role, content, call_id, calls, created in rows:
                time.sleep(NONATOMIC_PAUSE)
                self.db.execute(
                    "INSERT INTO messages(session_id, role, content, tool_call_id, tool_calls, active, created_at)"
                    " VALUES (?, ?, ?, ?, ?, 1, ?)", (session_id, role, content, call_id, calls, created))
        super().add(session_id, msg)


class DeferredWrites:
    """--bug persist_at_turn_end: a SQLite connection whose writes (INSERT,
    UPDATE, DELETE) are held in memory and run, in one transaction, only by
    ``flush`` (at the turn's end) or before any other statement (a read at
    start-up, the checkpoint at close)."""

    WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")

    def __init__(self, db):
        self.db, self.pending = db, []

    def execute(self, sql, params=()):
        if sql.lstrip().split(None, 1)[0].upper() in self.WRITES:
            self.pending.append((sql, params))
            return None
        self.flush()
        return self.db.execute(sql, params)

    def flush(self):
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        self.db.execute("BEGIN")
        for sql, params in pending:
            self.db.execute(sql, params)
        self.db.execute("COMMIT")

    def __getattr__(self, name):
        return getattr(self.db, name)


def corrupt_db_file(path, root_page):
    """--bug corrupt_store: damage state.db behind SQLite's back, after close.

    The target is the ``messages_created_at`` index, which the messages query
    never uses: the 8-byte key of every cell of that b-tree is overwritten, so
    the messages query still works while ``PRAGMA integrity_check`` reports
    rows missing from the index. If the index cannot be walked, 64 bytes of the
    cell area of page 2 are overwritten instead."""
    with open(path, "r+b") as f:
        header = f.read(100)
        page_size = int.from_bytes(header[16:18], "big")
        if page_size == 1:
            page_size = 65536
        pages = os.fstat(f.fileno()).st_size // page_size
        if pages < 3:
            log(f"corrupt_store: state.db has only {pages} pages")
        hit, seen, stack = 0, set(), [root_page] if root_page else []
        while stack:
            pg = stack.pop()
            if pg in seen or not 1 < pg <= pages:
                continue
            seen.add(pg)
            base = page_size * (pg - 1)
            f.seek(base)
            page = bytearray(f.read(page_size))
            kind = page[0]
            if kind not in (0x02, 0x0A):          # interior / leaf index page
                continue
            hdr = 12 if kind == 0x02 else 8
            if kind == 0x02:
                stack.append(int.from_bytes(page[8:12], "big"))
            for k in range(int.from_bytes(page[3:5], "big")):
                c = int.from_bytes(page[hdr + 2 * k:hdr + 2 * k + 2], "big")
                if kind == 0x02:
                    stack.append(int.from_bytes(page[c:c + 4], "big"))
                    c += 4
                if c + 12 > page_size or page[c] >= 0x80:
                    continue
                rec = c + 1                        # record: header size 3, REAL, rowid
                if page[rec] == 3 and page[rec + 1] == 7:
                    page[rec + 3:rec + 11] = struct.pack(">d", -1.0)
                    hit += 1
            f.seek(base)
            f.write(page)
        if not hit:
            base = page_size
            f.seek(base)
            ph = f.read(8)
            start = int.from_bytes(ph[5:7], "big") or 65536
            f.seek(base + max(8, min(start, page_size - 64)))
            f.write(bytes((0xA5 ^ i) & 0xFF for i in range(64)))
        f.flush()
        os.fsync(f.fileno())
    log(f"corrupt_store: damaged {hit} index cells" if hit else "corrupt_store: overwrote 64 bytes of page 2")


# ---------------------------------------------------------------- turn control

class TurnControl:
    """The interrupt flag and the in-flight socket, shared with the stdin thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.event = threading.Event()
        self.active = False
        self.sock = None

    def begin(self):
        with self.lock:
            self.active = True

    def end(self, clear):
        with self.lock:
            self.active = False
            self.sock = None
            if clear:
                self.event.clear()

    def interrupted(self):
        return self.event.is_set()

    def interrupt(self):
        with self.lock:
            if not self.active:
                log("interrupt between turns: ignored")
                return
            self.event.set()
            # Shut the in-flight socket down (never close it: the worker owns the
            # descriptor). Under the lock, so the worker cannot close it meanwhile.
            if self.sock is not None:
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        log("interrupt received")

    def set_sock(self, sock):
        """Register the in-flight socket; True if an interrupt is already pending."""
        with self.lock:
            self.sock = sock
            return self.event.is_set()


# ---------------------------------------------------------------- agent

class Agent:
    # Defaults for subclasses with their own __init__ (examples/pgworker): the
    # chat wire, on the `self.path` they set, no MCP server.
    wire = "openai-chat"
    base_path = None
    mcp = None
    is_subagent = False      # a nested loop run by the `task` tool (see run_subagent)
    orphans = ()             # subagent threads left running (bug orphan_subagent)
    sandbox = False          # config "sandbox": shell commands run under SANDBOX
    last_mcp_error = False
    session_lost = False     # --bug outage_wedges_session: the session taken for lost

    def __init__(self, cfg, spec, bugs, home, wire=None):
        self.bugs = bugs
        self.wire = wire or spec.get("wire") or cfg.get("wire") or "openai-chat"
        if self.wire not in WIRES:
            raise ValueError(f"unknown wire {self.wire!r}: expected one of {', '.join(WIRES)}")
        self.home = home
        self.session_id = str(spec.get("session_id") or "default")
        self.workdir = spec.get("workdir") or os.getcwd()
        self.model = cfg.get("model", "gpt-4o-mini")
        self.api_key = cfg.get("api_key", "chaosrun")
        self.credentials_path = os.path.join(home, ".refagent", "credentials")
        self._cached_key = None   # --bug auth_cached_key
        self.stale_timeout = float(cfg.get("stale_timeout", 30))
        self.request_timeout = float(cfg.get("request_timeout", 60))
        self.api_max_retries = int(cfg.get("api_max_retries", 2))
        self.max_turns = int(cfg.get("max_turns", 8))
        self.tool_timeout = float(cfg.get("tool_timeout", 60))
        self.sandbox = cfg.get("sandbox") is True
        url = urllib.parse.urlsplit(cfg["base_url"].rstrip("/"))
        self.https = url.scheme == "https"
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or (443 if self.https else 80)
        self.base_path = url.path or ""
        self.ctl = TurnControl()
        self.breaker_open = False
        self.spawn_lock = threading.Lock()
        self.fg_pids = set()
        self.kept_unreaped = []   # --bug zombie_children: probes never waited for
        self.bg_jobs = []    # (id, pid, pgid, start_ticks) of this incarnation
        self.resume = spec.get("resume") is True
        self.pending_replay = []   # --bug replay_side_effect: calls to re-run before the next turn
        self.leaked = []           # --bug memory_leak: tool outputs kept whole, never trimmed
        state_dir = os.path.join(home, ".refagent")
        os.makedirs(state_dir, exist_ok=True)
        self.bg_dir = os.path.join(state_dir, "bg")
        store_cls = NonAtomicStore if self.bug("nonatomic_rewrite") else Store
        cap = None if self.bug("huge_output_whole") else PERSIST_CAP
        db = os.path.join(state_dir, "state.db")
        if cfg.get("store") == "jsonl":
            name = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.session_id)
            transcript = os.path.join(state_dir, "sessions", name + ".jsonl")
            self.store = JsonlStore(db, cap=cap, transcript=transcript, bugs=self.bugs)
        else:
            self.store = store_cls(db, cap=cap)
        if self.bug("persist_at_turn_end"):
            self.store.db = DeferredWrites(self.store.db)
        # A previous incarnation (SIGKILLed mid-turn) may have left processes and
        # unanswered tool calls behind: clean up first, then repair the history.
        self.kill_stale_jobs()
        self.history = self.store.load(self.session_id)
        self._repair_history()
        self.start_mcp(cfg)

    def bug(self, name):
        return name in self.bugs

    def persist_turn(self):
        """--bug persist_at_turn_end: write what the turn held back."""
        if isinstance(self.store.db, DeferredWrites):
            with self.store.lock:
                self.store.db.flush()

    def _repair_history(self):
        """A previous process killed mid-batch may have left tool calls unanswered.

        Each one gets a synthetic result: the call is never re-run, as it may
        have had side effects before the process died."""
        for idx in range(len(self.history) - 1, -1, -1):
            m = self.history[idx]
            if m["role"] == "assistant" and m.get("tool_calls"):
                answered = {x.get("tool_call_id") for x in self.history[idx + 1:] if x["role"] == "tool"}
                missing = [tc for tc in m["tool_calls"] if tc.get("id") not in answered]
                if not missing:
                    break
                log(f"history: {len(missing)} tool call(s) without a result"
                    + (" (resume)" if self.resume else ""))
                if self.bug("resume_rolls_back_turn"):
                    self._roll_back_unfinished_turn()
                elif self.bug("lost_result_on_restart"):
                    log("leaving them unanswered (bug lost_result_on_restart)")
                elif self.bug("replay_side_effect"):
                    log("they will be re-run (bug replay_side_effect)")
                    self.pending_replay = missing
                else:
                    for tc in missing:
                        self._append({"role": "tool", "tool_call_id": tc.get("id"), "content": RESTART_RESULT})
                break

    def _roll_back_unfinished_turn(self):
        """--bug resume_rolls_back_turn: drop everything after the last user
        message, in memory and in the store (the finished tool steps too)."""
        users = [i for i, m in enumerate(self.history) if m["role"] == "user"]
        if not users:
            return
        keep = users[-1] + 1
        dropped = len(self.history) - keep
        self.history = self.history[:keep]
        self.store.truncate_after(self.session_id, keep)
        log(f"rolled back {dropped} message(s) of the unfinished turn (bug resume_rolls_back_turn)")

    def replay_pending(self):
        """--bug replay_side_effect: re-run the calls the previous incarnation left unanswered."""
        calls, self.pending_replay = self.pending_replay, []
        for tc in calls:
            out, _intr = self.execute_tool(tc)
            self._append({"role": "tool", "tool_call_id": tc.get("id"), "content": out})

    def _append(self, msg):
        self.history.append(msg)
        self.store.add(self.session_id, msg)

    # ------------------------------------------------------------ turns

    def _keep_history_copy(self):
        """--bug history_copies_per_turn: a deep copy of the whole history,
        serialised, kept for the life of the process (an undo stack nobody
        trims)."""
        if not self.bug("history_copies_per_turn"):
            return
        kept = getattr(self, "_history_copies", None)
        if kept is None:
            kept = self._history_copies = []
        kept.append(json.dumps(self.history).encode())

    def run_turn(self, text, resumed=False):
        self._keep_history_copy()
        if self.pending_replay:
            self.replay_pending()
        last = self.history[-1] if self.history else None
        if resumed and last and last.get("role") == "user" and last.get("content") == text:
            # The dead incarnation stored this turn's user message and was
            # killed before anything else: run the turn on it, don't store it twice.
            log("resume: the turn's user message is already stored; not storing it again")
        else:
            self._append({"role": "user", "content": text})
        if self.breaker_open:
            self.breaker_open = False   # half-open: the next turn may try again
            log("breaker open: refusing turn")
            return dict(failed=True, interrupted=False, completed=False,
                        final=BREAKER_FINAL, exit_reason="breaker_open")
        had_success = False
        rounds = 0
        self.turn_attempts = 0   # --bug shared_retry_budget: retries counted per turn
        self.value_retries = 0   # --bug retry_empty_answer / continue_after_length
        self.replays = 0         # stale replays dropped this turn
        self.continued = 0       # continuations after a cut answer
        try:
            while True:
                if self.ctl.interrupted():
                    raise Interrupted()
                try:
                    reply_text, tool_calls = self._bug_nested_retry(self.call_model)
                except TurnFailed as f:
                    if f.all_stale and not had_success:
                        log("every attempt ended stale: opening breaker")
                        self.breaker_open = True
                    return dict(failed=True, interrupted=False, completed=False,
                                final=f.msg, exit_reason="provider_error")
                had_success = True
                if not tool_calls and (self._bug_value_retry(reply_text)
                                       or self._continue_after_cut(reply_text)):
                    continue
                if tool_calls and self._stale_replay(tool_calls):
                    if self.replays > self.api_max_retries:
                        return dict(failed=True, interrupted=False, completed=False,
                                    final="the model keeps replaying tool calls that already ran",
                                    exit_reason="provider_error")
                    continue
                if tool_calls:
                    self._append({"role": "assistant", "content": reply_text or None,
                                  "tool_calls": tool_calls})
                    rounds += 1
                    if self.run_batch(tool_calls):
                        raise Interrupted()
                    if rounds >= self.max_turns:
                        return dict(failed=False, interrupted=False, completed=False,
                                    final=f"stopped: max turns ({self.max_turns}) reached",
                                    exit_reason="max_turns")
                    continue
                self._append({"role": "assistant", "content": reply_text})
                return dict(failed=False, interrupted=False, completed=True,
                            final=reply_text if reply_text.strip() else "(empty answer)",
                            exit_reason="completed")
        except Interrupted:
            return dict(failed=False, interrupted=True, completed=False,
                        final=INTERRUPTED_FINAL, exit_reason="interrupted")

    def system_prompt(self):
        """The system prompt, naming every MCP server that is unavailable (so
        the model, and the user through it, learn the tools are missing rather
        than meeting a silent gap)."""
        notes = [f"MCP server `{s.name}` is unavailable: {s.unavailable}; its tools are not offered."
                 for s in (self.mcp.servers.values() if self.mcp else []) if s.unavailable]
        return "\n".join([SYSTEM_PROMPT] + notes)

    def request_messages(self):
        return [{"role": "system", "content": self.system_prompt()}] + self.history

    # ------------------------------------------------------------ model calls

    def request_body(self):
        suffix, req = wire_request(self.wire, self.model, self.history, self.tool_specs(),
                                   system=self.system_prompt())
        if self.wire == "openai-chat":
            req["messages"] = self.request_messages()
        if self.base_path is not None:
            self.path = self.base_path + suffix
        return json.dumps(req).encode()

    def call_model(self):
        body = self.request_body()
        storm = self.bug("retry_storm")
        max_retries = 60 if storm else self.api_max_retries
        if self.is_subagent and self.bug("subagent_no_retry"):
            max_retries = 0
        kinds = []
        attempt = 0
        compactions = 0
        failing_since = None   # when this call's run of failed attempts began
        self._bug_session_lost()
        auth = {}   # a 401's re-read key (once), or the key pinned by a bug
        while True:
            if self.ctl.interrupted():
                raise Interrupted()
            try:
                return self.model_attempt(body, fallback=self._bug_fallback_path(attempt),
                                          key=auth.pop("next", None) or auth.get("pinned"))
            except ProviderError as e:
                kinds.append(e.kind)
                log(f"model call attempt {attempt + 1} failed: {e.msg}")
                failing_since = failing_since or time.monotonic()
                if e.key is not None:
                    fresh = self.after_unauthorized(e, auth)
                    if fresh is not None:
                        auth["next"] = fresh
                        continue
                if e.context:
                    compactions += 1
                    body = self.after_overflow(e, compactions)
                    continue
                if not e.transient:
                    raise TurnFailed(f"provider error: {e.msg} (not retried)", all_stale=False)
                if self._bug_retries_used(attempt) >= max_retries:
                    raise TurnFailed(f"provider error: {e.msg} after {attempt + 1} attempts",
                                     all_stale=all(k == "stale" for k in kinds))
                self._bug_outage_wedges(failing_since)
                delay = self.backoff(e, attempt, storm)
                if delay and self.ctl.event.wait(delay):
                    self._bug_sticky_backoff_interrupt()
                    raise Interrupted()
                body = self._bug_combination_retry(e, body, attempt)
                attempt += 1

    def _bug_outage_wedges(self, failing_since):
        """--bug outage_wedges_session: once the provider has failed for
        OUTAGE_WEDGE_AFTER seconds in a row, the session's connection is
        taken for lost: this turn fails, and so does every later one."""
        if self.bug("outage_wedges_session") and time.monotonic() - failing_since >= OUTAGE_WEDGE_AFTER:
            self.session_lost = True
            raise TurnFailed(f"provider unreachable for {fmt_num(OUTAGE_WEDGE_AFTER)}s: connection lost "
                             "(bug outage_wedges_session)", all_stale=False)

    def _bug_session_lost(self):
        """--bug outage_wedges_session: a lost session fails every call at once."""
        if self.session_lost:
            raise TurnFailed("connection lost earlier in this session; start a new session "
                             "(bug outage_wedges_session)", all_stale=False)

    def backoff(self, e, attempt, storm):
        """Seconds to wait before retrying after ``e``: capped exponential
        backoff, never less than the provider's retry-after; a retry-after past
        the budget fails the turn now (surfaced) instead of sleeping past it."""
        if storm:
            return 0.0
        reset = getattr(e, "usage_reset", None)
        if reset is not None and self.bug("sleep_until_usage_reset"):
            log(f"usage limit: sleeping {fmt_num(reset)}s until it resets (bug sleep_until_usage_reset)")
            return reset
        delay = min(BACKOFF_START * (2 ** attempt), BACKOFF_CAP)
        if e.retry_after is None or self.bug("ignore_retry_after"):
            return delay
        if e.retry_after > RETRY_AFTER_BUDGET:
            raise TurnFailed(f"provider error: {e.msg}; it asks to retry after {fmt_num(e.retry_after)}s, "
                             f"past this agent's retry budget of {fmt_num(RETRY_AFTER_BUDGET)}s (not retried)",
                             all_stale=False)
        return max(delay, e.retry_after)

    def after_overflow(self, e, compactions):
        """The request body to send after a context-length error: the history
        with its tool results cut to COMPACT_TOOL_CHARS. When nothing is left to
        cut (the window is smaller than what the agent always sends), or after
        MAX_COMPACTIONS, the overflow is surfaced instead of retried."""
        if self.bug("compaction_loop"):
            if compactions > 50:
                raise TurnFailed(f"provider error: {e.msg} after {compactions} compactions", all_stale=False)
            log("compacting (bug compaction_loop: the summary is as long as what it replaces)")
            return self.request_body()
        if compactions > MAX_COMPACTIONS or not self.compact():
            raise TurnFailed(f"provider error: {e.msg}; the conversation does not fit the model's "
                             "context window even compacted (not retried)", all_stale=False)
        return self.request_body()

    def compact(self):
        """Cut every tool result over COMPACT_TOOL_CHARS (in memory: the store
        keeps what the tool said). True when anything got shorter."""
        changed = False
        for m in self.history:
            c = m.get("content")
            if m["role"] == "tool" and isinstance(c, str) and len(c) > COMPACT_TOOL_CHARS:
                m["content"] = c[:COMPACT_TOOL_CHARS] + f"\n[... {len(c) - COMPACT_TOOL_CHARS} chars cut to fit the context window]"
                changed = True
        log(f"context window exceeded: compacted tool results ({'some cut' if changed else 'nothing to cut'})")
        return changed

    # ---------------------------------------------- combination bugs (explore)
    # Each of these shows only when two faults meet (chaosrun explore finds
    # them); no row of scenarios.yaml or process_faults.yaml triggers one.

    def _bug_sticky_backoff_interrupt(self):
        """--bug sticky_backoff_interrupt: an interrupt that arrives while a
        retryable error is handled (its response read, its backoff) is not
        cleared at the turn's end (see clear_interrupt)."""
        if self.bug("sticky_backoff_interrupt"):
            log("interrupt during backoff: keeping it set (bug sticky_backoff_interrupt)")
            self._sticky_interrupt = True

    def clear_interrupt(self):
        """Whether the turn's end clears the interrupt flag."""
        if self.bug("wedged_after_interrupt"):
            return False
        if getattr(self, "_sticky_interrupt", False):
            self._sticky_interrupt = False
            return False
        return True

    def _bug_combination_retry(self, e, body, attempt):
        """The request body of the next attempt after error ``e``: ``body``,
        except under --bug resend_batch_minus_one (a 429 after a parallel
        batch drops the batch's last result); under --bug replay_after_5xx a
        first 5xx right after a single tool call's result re-runs that call."""
        h = self.history
        if (self.bug("replay_after_5xx") and attempt == 0 and e.msg.startswith("HTTP 5")
                and len(h) >= 2 and h[-1]["role"] == "tool"
                and len(h[-2].get("tool_calls") or []) == 1):
            tc = h[-2]["tool_calls"][0]
            log(f"re-running {tc.get('id')} after a 5xx (bug replay_after_5xx)")
            self.execute_tool(tc)
        if not (self.bug("resend_batch_minus_one") and e.msg.startswith("HTTP 429")):
            return body
        n = 0
        while n < len(h) and h[-1 - n]["role"] == "tool":
            n += 1
        if n < 2 or len(h) <= n or len(h[-1 - n].get("tool_calls") or []) < 2:
            return body
        hist = h[:-1]
        _suffix, req = wire_request(self.wire, self.model, hist)
        if self.wire == "openai-chat":
            req["messages"] = [{"role": "system", "content": SYSTEM_PROMPT}] + hist
        log("429 after a parallel batch: re-sending it without its last result (bug resend_batch_minus_one)")
        return json.dumps(req).encode()

    # ---------------------------------------------- persistence bugs (explore v2)
    # Each shows only when a fault lasts past one step's retries (or errors
    # land on two steps of one turn); explore's persistent faults find them.

    def _bug_value_retry(self, reply_text):
        """--bug retry_empty_answer: an empty answer is asked for again with
        the very same request (up to 8 times, 0.2 s apart); --bug
        hot_reask_empty: once, at once. --bug
        continue_after_length: an answer cut for length is kept and followed
        by a user "Continue." (up to 20 times). True: call the model again."""
        if self._bug_invented_call(reply_text):
            return True
        if self.bug("retry_empty_answer") and not reply_text.strip() and self.value_retries < 8:
            self.value_retries += 1
            log(f"empty answer: asking again (retry {self.value_retries}; bug retry_empty_answer)")
            time.sleep(0.2)
            return True
        if self.bug("hot_reask_empty") and not reply_text.strip() and not self.value_retries:
            self.value_retries += 1
            log("empty answer: asking again at once (bug hot_reask_empty)")
            return True
        cut = getattr(self, "last_finish", None) == "length"
        if self.bug("continue_after_length") and cut and self.value_retries < 20:
            self.value_retries += 1
            self._append({"role": "assistant", "content": reply_text})
            self._append({"role": "user", "content": "Continue."})
            log(f"answer cut for length: continuing ({self.value_retries}; bug continue_after_length)")
            return True
        return False

    def _continue_after_cut(self, reply_text):
        """An answer cut for length is kept and continued once a turn (a
        user "Continue."); a second cut ends the turn on it. --bug
        paste_partial pastes the partial answer into the continuation
        request as well. True: call the model again."""
        cut = getattr(self, "last_finish", None) == "length"
        if not cut or not reply_text.strip() or self.continued:
            return False
        self.continued = 1
        self._append({"role": "assistant", "content": reply_text})
        note = "Continue."
        if self.bug("paste_partial"):
            note = f"Continue from: {reply_text}"
            log("answer cut for length: pasting it into the continuation (bug paste_partial)")
        self._append({"role": "user", "content": note})
        log("answer cut for length: continuing once")
        return True

    def _stale_replay(self, tool_calls):
        """A reply whose every tool call reuses an id this history already
        answered is a stale replay (a cache serving an earlier reply again):
        it is dropped, not run again, and the model asked again (the turn
        fails past api_max_retries replays). True: it was dropped or answered.
        --bug answer_replayed_call keeps it with an error result for each
        call (a second result for the id)."""
        answered = {m.get("tool_call_id") for m in self.history if m.get("role") == "tool"}
        if not all(tc.get("id") in answered for tc in tool_calls):
            return False
        ids = ", ".join(tc.get("id") or "" for tc in tool_calls)
        if self.bug("answer_replayed_call"):
            log(f"replayed tool call {ids}: answering it again (bug answer_replayed_call)")
            self._append({"role": "assistant", "content": None, "tool_calls": tool_calls})
            for tc in tool_calls:
                self._append({"role": "tool", "tool_call_id": tc.get("id"),
                              "content": "error: this tool call already ran"})
            return True
        self.replays += 1
        log(f"replayed tool call {ids}: dropped, asking again ({self.replays})")
        return True

    def _bug_invented_call(self, reply_text):
        """--bug invent_call_on_empty_answer: an answer with no text and no
        tool calls gets a made-up call and its error result, once a turn
        (a result for an id the model never issued). True: ask again."""
        if not self.bug("invent_call_on_empty_answer") or reply_text.strip() or self.value_retries:
            return False
        self.value_retries += 1
        tc = {"id": "call_invented_0", "type": "function",
              "function": {"name": "shell", "arguments": "{}"}}
        log("empty answer: adding a made-up tool call (bug invent_call_on_empty_answer)")
        self._append({"role": "assistant", "content": None, "tool_calls": [tc]})
        self._append({"role": "tool", "tool_call_id": tc["id"],
                      "content": "error: the tool call was lost"})
        return True

    def _bug_nested_retry(self, call):
        """--bug nested_retry_after_tool: once the turn has tool results, the
        turn loop retries a model call that already failed all its retries
        (an outer retry around the client's own, as in "don't lose the tool
        work"), so a fault that persists makes (retries + 1)² calls."""
        outer = 0
        while True:
            try:
                return call()
            except TurnFailed:
                last = self.history[-1] if self.history else {}
                if not (self.bug("nested_retry_after_tool") and last.get("role") == "tool"
                        and outer < self.api_max_retries):
                    raise
                outer += 1
                log(f"retrying the step after its tool results (outer retry {outer}; bug nested_retry_after_tool)")

    def _bug_retries_used(self, attempt):
        """Retries used by this model call: ``attempt``; under --bug
        shared_retry_budget, every retry of the turn so far (one counter for
        all steps, so earlier steps' errors use up this call's retries)."""
        if not self.bug("shared_retry_budget"):
            return attempt
        self.turn_attempts = getattr(self, "turn_attempts", 0)
        used = self.turn_attempts
        self.turn_attempts += 1
        return used

    def _bug_fallback_path(self, attempt):
        """--bug fallback_no_timeout: the last-chance retry of a call that
        continues after tool results goes over a fresh 'fallback' connection
        built without the request timeout (set on the main path only)."""
        last = self.history[-1] if self.history else {}
        return (self.bug("fallback_no_timeout") and attempt >= 2 and attempt >= self.api_max_retries
                and last.get("role") == "tool")

    def list_models(self):
        """GET the provider's model list once at start-up, as agents do to check
        the model or fill a picker: waited for at most MODELS_TIMEOUT seconds,
        a failure only logged (the agent goes on with its configured model).
        Under --bug models_list_no_timeout it is waited for without a timeout:
        a list that never comes holds the start-up for ever."""
        if self.base_path is None:
            return
        path = self.base_path + models_path(self.wire)
        timeout = None if self.bug("models_list_no_timeout") else MODELS_TIMEOUT
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=timeout)
        try:
            headers = wire_headers(self.wire, self.current_key())
            headers["Accept"] = "application/json"
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            resp.read(1 << 20)
            log(f"model list: HTTP {resp.status}")
        except (OSError, http.client.HTTPException) as e:
            log(f"model list unavailable ({e!r}); going on with {self.model}")
        finally:
            conn.close()

    def _connection(self, fallback=False):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        if fallback:
            log("last-chance retry over the fallback connection (no timeout; bug fallback_no_timeout)")
            return cls(self.host, self.port)
        return cls(self.host, self.port, timeout=self.request_timeout)

    def current_key(self):
        """The API key: the credentials file as it is now (a refreshed key is
        picked up by the next request), else the config's ``api_key``. Under
        --bug auth_cached_key, the key read the first time, for ever."""
        if self.bug("auth_cached_key") and self._cached_key is not None:
            return self._cached_key
        try:
            with open(self.credentials_path, encoding="utf-8") as f:
                key = f.read().strip() or self.api_key
        except OSError:
            key = self.api_key
        self._cached_key = key
        return key

    def after_unauthorized(self, e, state):
        """What to do after a 401 refused ``e.key``: the key to retry with
        (once, when re-reading the key gave a new one), or TurnFailed. Under
        --bug auth_retry_same_key the 401 is retried, transient, with the key
        it refused (``state['pinned']``)."""
        if self.bug("auth_retry_same_key"):
            log("401: retrying with the same key (bug auth_retry_same_key)")
            state["pinned"] = e.key
            e.transient = True
            return None
        fresh = self.current_key()
        if fresh != e.key and not state.get("reread"):
            state["reread"] = True
            log("401: the API key changed since that request; retrying once with the new key")
            return fresh
        raise TurnFailed(f"provider error: {e.msg}; the API key was refused and re-reading it "
                         "gave no new one (not retried)", all_stale=False)

    def model_attempt(self, body, fallback=False, key=None):
        conn = self._connection(fallback)
        try:
            return self._attempt(conn, body, key or self.current_key())
        except Interrupted:
            raise
        except ProviderError as e:
            if self.ctl.interrupted():
                if e.transient:
                    self._bug_sticky_backoff_interrupt()
                raise Interrupted()
            raise
        except (OSError, http.client.HTTPException) as e:
            if self.ctl.interrupted():
                raise Interrupted()
            raise ProviderError("connect", True, f"connection error: {e!r}")
        finally:
            self.ctl.set_sock(None)
            try:
                conn.close()
            except Exception:
                pass

    def _attempt(self, conn, body, key):
        rt = fmt_num(self.request_timeout)
        try:
            conn.connect()
        except TimeoutError:
            raise ProviderError("timeout", True, f"timed out connecting ({rt}s)")
        # Keep our own reference: with `Connection: close`, http.client hands the
        # socket to the response and sets conn.sock to None.
        sock = conn.sock
        if self.ctl.set_sock(sock):
            raise Interrupted()
        try:
            conn.request("POST", self.path, body=body, headers=wire_headers(self.wire, key))
            resp = conn.getresponse()
        except TimeoutError:
            raise ProviderError("timeout", True, f"no response headers within {rt}s")
        status = resp.status
        if status != 200:
            retry_after = None
            ra = resp.getheader("Retry-After")
            if ra:
                try:
                    retry_after = max(0.0, float(ra))
                except ValueError:
                    pass
            try:
                sock.settimeout(min(self.request_timeout, 5.0))
                detail = resp.read(65536).decode("utf-8", "replace")
            except Exception:
                detail = ""
            msg = f"HTTP {status}"
            err_obj = error_object(detail)
            message, body_retry, final = error_detail(err_obj)
            if message:
                msg += f": {message}"
            elif detail.strip():
                msg += f": {detail.strip()[:200]}"
            if retry_after is None:
                retry_after = body_retry
            transient = status == 429 or status >= 500 or not (400 <= status < 500)
            if final:
                transient = False
                msg += " (quota used up)"
            reset = usage_reset(status, err_obj, retry_after)
            if reset is not None:
                # Final until it resets: surfaced now, saying when.
                transient = self.bug("sleep_until_usage_reset")
                msg += f" (usage limit; resets in {fmt_num(reset)}s)"
            if status == 400 and self.bug("retry_400"):
                transient = True
            err = ProviderError("http", transient, msg, retry_after,
                                context=is_context_error(status, message or detail),
                                key=key if status == 401 else None)
            err.usage_reset = reset
            raise err
        # Streaming: every gap between body bytes is bounded by the stale timeout.
        read_timeout = self.request_timeout if self.bug("no_stale_timeout") else self.stale_timeout
        if self.bug("trusts_started_stream"):
            read_timeout = 86400.0   # a dead socket after a wake is waited on for a day
        sock.settimeout(read_timeout)
        ctype = (resp.getheader("Content-Type") or "").lower()
        if "text/event-stream" in ctype:
            return self._read_sse(resp, read_timeout)
        return self._read_json(resp, read_timeout)

    def _read_chunk(self, resp, read_timeout, finished):
        """One read of the body; None at a clean end. Raises ProviderError."""
        try:
            data = resp.read1(65536)
        except TimeoutError:
            if finished:
                return None
            raise ProviderError("stale", True, f"stale stream: no data for {fmt_num(read_timeout)}s")
        except (OSError, http.client.HTTPException) as e:
            if self.ctl.interrupted():
                raise Interrupted()
            if finished:
                return None
            raise ProviderError("dropped", True, f"stream dropped: {e!r}")
        if not data:
            if self.ctl.interrupted():
                raise Interrupted()
            return None
        return data

    def _read_sse(self, resp, read_timeout):
        st = StreamState()
        event = ""
        buf = b""
        progress = time.monotonic()   # the last event that was more than a keepalive
        while not st.done:
            data = self._read_chunk(resp, read_timeout, st.finished)
            if data is None:
                if st.finished:
                    break
                raise ProviderError("dropped", True, "stream ended before it finished")
            buf += data
            if len(buf) > 16_000_000:
                raise ProviderError("garbage", True, "garbage stream: line too long")
            while b"\n" in buf and not st.done:
                line, buf = buf.split(b"\n", 1)
                line = line.rstrip(b"\r")
                if not line:
                    event = ""
                    continue
                if line.startswith(b"event:"):
                    event = line[6:].strip().decode("utf-8", "replace")
                    continue
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    st.done = True
                    break
                try:
                    obj = json.loads(payload)
                except ValueError:
                    raise ProviderError("garbage", True, f"garbage stream: {payload[:80]!r}")
                if not isinstance(obj, dict):
                    raise ProviderError("garbage", True, f"garbage stream: {payload[:80]!r}")
                if (obj.get("type") or event) not in KEEPALIVE_EVENTS:
                    progress = time.monotonic()
                pieces = len(st.text)
                try:
                    handle_event(self.wire, st, event, obj, self._merge_tool_call)
                except ValueError as e:
                    raise ProviderError("http", True, str(e))
                st.chars += sum(len(t) for t in st.text[pieces:])
                if st.chars > MAX_REPLY_CHARS:
                    raise ProviderError("runaway", False, f"runaway reply: over {MAX_REPLY_CHARS} chars of text")
            # Judged after the chunk is parsed: data that waited in the socket
            # (the agent was frozen) still counts when it carries content.
            if (time.monotonic() - progress > read_timeout and not st.finished and not st.done
                    and not self.bug("keepalive_resets_idle")):
                raise ProviderError("stale", True, f"stale stream: only keepalives for {fmt_num(read_timeout)}s")
        self.last_finish = st.reason
        return "".join(st.text), self._tool_call_list(st.calls)

    @staticmethod
    def _merge_tool_call(calls, tc):
        if not isinstance(tc, dict):
            return
        idx = tc.get("index")
        if not isinstance(idx, int):
            if tc.get("id") and all(c["id"] != tc["id"] for c in calls.values()):
                idx = len(calls)
            else:
                idx = max(calls) if calls else 0
        c = calls.setdefault(idx, {"id": "", "name": "", "arguments": ""})
        if tc.get("id"):
            c["id"] = tc["id"]
        fn = tc.get("function") or {}
        if isinstance(fn.get("name"), str):
            c["name"] += fn["name"]
        args = fn.get("arguments")
        if isinstance(args, str):
            c["arguments"] += args
        elif args is not None:
            c["arguments"] += json.dumps(args)

    @staticmethod
    def _tool_call_list(calls):
        out = []
        for idx in sorted(calls):
            c = calls[idx]
            out.append({"id": c["id"] or f"call_{secrets.token_hex(8)}", "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]}})
        return out

    def _read_json(self, resp, read_timeout):
        """A non-streaming 200: the wire's whole reply object, or garbage."""
        chunks, total = [], 0
        while True:
            data = self._read_chunk(resp, read_timeout, False)
            if data is None:
                break
            chunks.append(data)
            total += len(data)
            if total > 16_000_000:
                raise ProviderError("garbage", True, "garbage body: too large")
        raw = b"".join(chunks)
        try:
            text, found = whole_reply(self.wire, json.loads(raw))
            self.last_finish = None
            calls = {}
            for i, (cid, name, args) in enumerate(found):
                calls[i] = {"id": cid or "", "name": name or "", "arguments": args or ""}
            return text, self._tool_call_list(calls)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise ProviderError("garbage", True, f"garbage body: {raw[:80]!r}")

    # ------------------------------------------------------------ tools

    def run_batch(self, tool_calls):
        """Run every call of a batch, answering each id. True if interrupted."""
        if self._bug_mcp_replies_by_arrival(tool_calls):
            return self.ctl.interrupted()
        answered = 0
        interrupted = False
        first_output = None
        try:
            for i, tc in enumerate(tool_calls):
                if self.ctl.interrupted():
                    interrupted = True
                    break
                self.last_mcp_error = False
                out, intr = self.execute_tool(tc)
                if i == 0:
                    first_output = out
                elif self.bug("lost_parallel_result") and len(tool_calls) >= 2:
                    out = first_output
                if self.last_mcp_error and self.bug("mcp_drop_error_result"):
                    log(f"dropping the isError result of {tc['id']} (bug mcp_drop_error_result)")
                else:
                    self._append({"role": "tool", "tool_call_id": tc["id"], "content": out})
                answered += 1
                if intr:
                    interrupted = True
                    break
        finally:
            for tc in tool_calls[answered:]:
                self._append({"role": "tool", "tool_call_id": tc["id"], "content": "interrupted"})
        return interrupted or self.ctl.interrupted()

    def _bug_mcp_replies_by_arrival(self, tool_calls):
        """--bug mcp_replies_by_arrival: a batch of two or more calls, every
        one to the same MCP server, is sent at once and each call gets the
        answer that arrived in its place (see McpServer.call_batch_by_arrival).
        True when the batch was answered so."""
        if not self.bug("mcp_replies_by_arrival") or len(tool_calls) < 2 or self.mcp is None:
            return False
        names = [tc["function"].get("name") or "" for tc in tool_calls]
        servers = {id(self.mcp.owner(n)) for n in names}
        server = self.mcp.owner(names[0])
        if server is None or len(servers) != 1:
            return False
        try:
            calls = [(n, json.loads(tc["function"].get("arguments") or "{}")) for n, tc in zip(names, tool_calls)]
        except ValueError:
            return False
        texts = server.call_batch_by_arrival(calls, self.ctl.interrupted)
        if texts is None:
            return False
        for tc, text in zip(tool_calls, texts):
            self._append({"role": "tool", "tool_call_id": tc["id"], "content": text})
        return True

    def execute_tool(self, tc):
        name = tc["function"].get("name") or ""
        raw = tc["function"].get("arguments") or ""
        server = self.mcp.owner(name) if self.mcp else None
        if server is not None:
            return self.execute_mcp(server, name, raw)
        if name not in ("shell", "task", "write_file") or (name != "shell" and self.is_subagent):
            return f"error: unknown tool {name}", False
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError as e:
            return f"error: invalid JSON arguments: {e}", False
        if not isinstance(args, dict):
            return "error: invalid JSON arguments: expected a JSON object", False
        if name == "write_file":
            return self.write_file(args)
        if name == "task":
            prompt = args.get("prompt")
            if not isinstance(prompt, str) or not prompt.strip():
                return "error: missing required argument 'prompt'", False
            if self.bug("subagent_fails_at_once"):
                return "error: the subagent could not be started (bug subagent_fails_at_once)", False
            return self.run_subagent(prompt)
        command = args.get("command")
        if command is None and self.bug("run_misnamed_args"):
            command = next((v for k, v in args.items() if "command" in k and isinstance(v, str)), None)
        if not isinstance(command, str) or not command.strip():
            return "error: missing required argument 'command'", False
        timeout = args.get("timeout")
        if timeout is None:
            timeout = self.tool_timeout
        elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            return "error: 'timeout' must be a positive number of seconds", False
        background = args.get("background") in (True, "true", "True", 1)
        log(f"tool shell: {command[:120]!r} (timeout {fmt_num(timeout)}s, background {background})")
        if self.sandbox:
            refused = self.sandbox_refused()
            if refused and not self._bug_sandbox_fallback_silent():
                return refused, False
            if not refused:
                command = "exec " + shlex.join(SANDBOX) + " bash -c " + shlex.quote(command)
        try:
            if background:
                return self.start_background(command), False
            return self.run_foreground(command, float(timeout))
        except OSError as e:
            return f"error: could not run command: {e}", False

    def write_path(self, args):
        """(absolute path inside the workdir, None) for write_file's ``path``
        argument, or (None, the tool's error)."""
        path, content = args.get("path"), args.get("content")
        if not isinstance(path, str) or not path.strip():
            return None, "error: missing required argument 'path'"
        if not isinstance(content, str):
            return None, "error: missing required argument 'content'"
        work = os.path.realpath(self.workdir)
        full = os.path.normpath(os.path.join(work, path))
        if os.path.commonpath([work, full]) != work or full == work:
            return None, f"error: {path} is outside the working directory"
        return full, None

    def write_file(self, args):
        """The ``write_file`` tool: the whole file written in the workdir."""
        full, err = self.write_path(args)
        if err:
            return err, False
        log(f"tool write_file: {full}")
        try:
            with open(full, "w", encoding="utf-8") as f:
                f.write(args["content"])
        except OSError as e:
            return f"error: could not write {args['path']}: {e}", False
        return f"wrote {len(args['content'])} chars to {args['path']}", False

    def sandbox_refused(self):
        """None when the tool sandbox starts here; else the tool result that
        says it could not (the command is not run unsandboxed). Under --bug
        sandbox_silent, that result is the wrapper's bare exit code."""
        try:
            p = subprocess.run(SANDBOX + ["true"], stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as e:
            why = str(e)
        else:
            if p.returncode == 0:
                return None
            why = p.stderr.decode("utf-8", "replace").strip() or f"exit code {p.returncode}"
        log(f"tool sandbox cannot start: {why}")
        if self.bug("sandbox_silent"):
            log("reporting it as the command's exit code (bug sandbox_silent)")
            return "exit code 1"
        if self.bug("sandbox_generic_error"):
            log("reporting it as a generic failure (bug sandbox_generic_error)")
            return "sandboxed command failed (exit 1)"
        return ("error: the tool sandbox could not start, so the command was not run "
                f"(nested in a sandbox or container that denies namespaces?): {why}")

    def _bug_sandbox_fallback_silent(self):
        """--bug sandbox_fallback_silent: a sandbox that cannot start is
        skipped and the command run without it; the result says nothing of
        it (only the log does)."""
        if not self.bug("sandbox_fallback_silent"):
            return False
        log("running the command unsandboxed, saying nothing (bug sandbox_fallback_silent)")
        return True

    # ------------------------------------------------------------ MCP
    # The client lives in mcp_client.py; here: config, the tool list offered to
    # the model, dispatch of `mcp_<server>_<tool>` calls, and shutdown at close.

    def start_mcp(self, cfg):
        """Connect every server of `mcp_servers` (before `ready`; a server that does
        not come up within the boot timeout leaves the agent without its tools)."""
        servers = cfg.get("mcp_servers")
        if not isinstance(servers, dict) or not servers:
            return
        call_timeout = float(cfg.get("mcp_timeout") or self.tool_timeout)
        boot_timeout = float(cfg.get("mcp_boot_timeout") or max(call_timeout, 10.0))
        self.mcp = mcp_client.McpClient(
            servers, call_timeout=call_timeout, boot_timeout=boot_timeout, cwd=self.workdir,
            env=dict(os.environ), log=log, bugs=self.bugs)
        self.mcp.start()
        for s in self.mcp.servers.values():
            if s.unavailable:
                log(f"starting without the tools of MCP server {s.name}: {s.unavailable}")

    def tool_specs(self):
        """Every tool offered to the model: shell, task and write_file (not to
        a subagent), then the MCP servers' tools."""
        if self.is_subagent:
            return [SHELL_TOOL]
        return [SHELL_TOOL, SUBAGENT_TOOL, WRITE_TOOL] + (self.mcp.tool_specs() if self.mcp else [])

    # ------------------------------------------------------------ subagent

    def run_subagent(self, prompt):
        """The `task` tool: a nested agent loop on `prompt`, in a thread, with
        its own history (not stored), its own interrupt control and the shell
        tool only, at most max_turns rounds. It is bounded by the tool timeout
        (unless bug subagent_no_deadline) and by the parent's interrupt: either
        stops it (its in-flight model call is cut, its foreground tool killed)
        and is waited for. Returns (result text, interrupted)."""
        sub = copy.copy(self)
        sub.is_subagent = True
        sub.history = []
        sub.ctl = TurnControl()
        sub._append = sub.history.append
        sub.pending_replay = []
        sub.breaker_open = False
        result = {}

        def work():
            sub.ctl.begin()
            try:
                result.update(sub.run_turn(prompt))
            except Exception as e:  # noqa: BLE001 (a subagent's crash is its result)
                result.update(failed=True, final=f"subagent crashed: {e}")
            finally:
                sub.ctl.end(clear=True)

        worker = threading.Thread(target=work, name="subagent", daemon=True)
        log(f"subagent: started on {prompt[:80]!r}")
        worker.start()
        budget = None if self.bug("subagent_no_deadline") else self.tool_timeout
        end = None if budget is None else time.monotonic() + budget
        stopped = None
        while worker.is_alive():
            worker.join(0.05)
            if self.ctl.interrupted():
                stopped = "interrupted"
            elif end is not None and time.monotonic() > end:
                stopped = "timeout"
            if stopped and worker.is_alive() and self.bug("orphan_subagent"):
                self._bug_orphan_subagent(sub, worker)
                break
            if stopped and worker.is_alive() and self._bug_subagent_abandoned_in_call():
                break
            if stopped and worker.is_alive():
                sub.ctl.interrupt()
                worker.join(5)
                if worker.is_alive():
                    log("subagent: still running 5s after it was stopped")
                break
        log(f"subagent: {stopped or result.get('exit_reason', 'ended')}")
        if stopped == "interrupted":
            return "interrupted", True
        if stopped == "timeout":
            return f"error: the subagent did not finish within {fmt_num(budget)}s and was stopped", False
        final = result.get("final", "")
        return (f"subagent failed: {final}" if result.get("failed") else final), False

    ORPHAN_GRACE = 1.0   # --bug orphan_subagent: seconds close waits for abandoned subagents

    def _bug_orphan_subagent(self, sub, worker):
        """--bug orphan_subagent: the parent stops waiting for its subagent but
        never stops it. It cuts the subagent's in-flight model call (so the
        parent's turn can end at once) without setting the subagent's interrupt
        flag, and does not wait: the subagent takes the cut for a dropped stream
        and retries its model call after the parent's turn has ended (close
        lets such subagents run on for ORPHAN_GRACE seconds, so the process
        is still there when they call)."""
        log("subagent: abandoned (bug orphan_subagent: its loop is left running)")
        self.orphans = [*self.orphans, worker]
        with sub.ctl.lock:
            if sub.ctl.sock is not None:
                try:
                    sub.ctl.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _bug_subagent_abandoned_in_call(self):
        """--bug subagent_abandoned_in_call: the parent stops waiting for its
        subagent and neither interrupts it nor cuts its model call: the
        subagent stays inside that call (a hung one never returns), holding
        its connection open after the parent's turn ended, and makes no new
        call. Its daemon thread goes only with the process."""
        if not self.bug("subagent_abandoned_in_call"):
            return False
        log("subagent: left inside its model call (bug subagent_abandoned_in_call)")
        return True

    def execute_mcp(self, server, name, raw):
        """Run one MCP tool call: (result text, interrupted). Sets last_mcp_error
        when the server marked the result isError."""
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError as e:
            return f"error: invalid JSON arguments: {e}", False
        if not isinstance(args, dict):
            return "error: invalid JSON arguments: expected a JSON object", False
        log(f"tool {name}: {raw[:120]!r}")
        text, is_error, interrupted = server.call(name, args, self.ctl.interrupted)
        self.last_mcp_error = is_error
        log(f"tool {name}: {'interrupted' if interrupted else 'isError' if is_error else 'done'}: {text[:120]!r}")
        return text, interrupted

    def close_mcp(self):
        if self.mcp is not None:
            self.mcp.close()

    def _stdin(self):
        return None if self.bug("stdin_open") else subprocess.DEVNULL

    def _spawn_gated(self, command, stdout, track_fg=False):
        """Start `bash -c command` in its own session, held at a gate until
        `_release`: the process is recorded in the store before the command
        runs, so an agent frozen or killed in between never leaves an
        unrecorded (unfenceable) job. If the agent dies first, the gate reads
        EOF and the command never runs."""
        r, w = os.pipe()
        try:
            with self.spawn_lock:
                proc = subprocess.Popen(["bash", "-c", GATE.format(fd=r), "refagent-gate", command],
                                        cwd=self.workdir, stdin=self._stdin(), stdout=stdout,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        pass_fds=(r,))
                if track_fg:
                    self.fg_pids.add(proc.pid)
                # Under the spawn lock, so reap_orphans cannot reap it first.
                start_ticks = proc_start_ticks(proc.pid)
        except BaseException:
            os.close(w)
            raise
        finally:
            os.close(r)
        return proc, w, start_ticks

    # Hooks over the store, so a subclass with another store (the Postgres worker)
    # runs the same tool code.

    def _record_tool(self, job_id, kind, proc, gate, start_ticks, command):
        """Record a gated tool process in the store, then let it run. Returns
        the job id as recorded, or None if the store refused it."""
        try:
            self.store.add_job(job_id, self.session_id, kind, proc.pid, proc.pid, start_ticks, command)
        except sqlite3.Error as e:
            log(f"could not record tool process: {e}")
            job_id = None
        finally:
            self._release(gate)
        return job_id

    def _end_tool(self, job_id):
        """Mark a foreground tool process ended in the store."""
        if job_id:
            try:
                self.store.end_job(job_id)
            except sqlite3.Error as e:
                log(f"could not mark tool process ended: {e}")

    def _after_tool(self):
        """Called once a foreground tool is gone; a subclass may stop the turn."""

    def _leak(self, raw):
        """--bug memory_leak: keep a tool's whole output four times over (raw
        bytes, text, the transcript log line, the rendered view), never
        trimmed: the agent's memory grows with every large output."""
        text = raw.decode("utf-8", "replace")
        self.leaked.extend([bytes(raw), text, json.dumps(text), "".join(["| ", text])])
        log(f"kept {len(raw)} bytes of tool output four times over (bug memory_leak)")

    def _keep_copies(self, raw):
        """--bug output_copies: keep a tool's whole output three times over
        (raw bytes, text, the transcript line), never trimmed; the buffer it
        was read into is let go first, so three copies are all it holds."""
        data = bytes(raw)
        del raw[:]
        text = data.decode("utf-8", "replace")
        self.leaked.extend([data, text, "".join(["| ", text])])
        log(f"kept {len(data)} bytes of tool output three times over (bug output_copies)")

    @staticmethod
    def _cut_whole(whole):
        """--bug output_read_whole: the whole output, read into memory, is
        decoded and split into lines, and only then cut to the cap."""
        text = whole.decode("utf-8", "replace")
        del whole[:]
        lines = text.splitlines(keepends=True)
        del text
        kept = bytearray()
        for line in lines:
            if len(kept) >= OUTPUT_CAP:
                break
            kept += line.encode()[:OUTPUT_CAP - len(kept)]
        log(f"read {sum(len(l) for l in lines)} chars of tool output whole before cutting it (bug output_read_whole)")
        return kept

    def _bg_entry(self, job_id, pid, start_ticks):
        """This incarnation's record of a background job (killed at close)."""
        return (job_id, pid, pid, start_ticks)

    @staticmethod
    def _release(gate):
        """Let a gated tool process run its command."""
        try:
            os.write(gate, b"go\n")
        except OSError:
            pass   # it was killed meanwhile
        os.close(gate)

    def _bug_probe_shell(self):
        """--bug zombie_children: the shell is probed (``bash --version``)
        by a child whose Popen object is kept and never waited for; the
        orphan reaper passes it by (it is among the kept ones), so it stays a
        zombie until the agent exits."""
        if not self.bug("zombie_children"):
            return
        with self.spawn_lock:
            probe = subprocess.Popen(["bash", "--version"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.kept_unreaped.append(probe)
        log(f"shell probe {probe.pid} left unreaped (bug zombie_children)")

    def run_foreground(self, command, timeout):
        self._bug_probe_shell()
        if ENGINE_CHILD:
            command = "exec python3 -c " + shlex.quote(ENGINE) + " " + shlex.quote(command)
        proc, gate, start_ticks = self._spawn_gated(command, subprocess.PIPE, track_fg=True)
        pgid = proc.pid
        try:
            job_id = self._record_tool("fg_" + secrets.token_hex(6), "fg", proc, gate,
                                       start_ticks, command)
        except BaseException:
            proc.stdout.close()
            with self.spawn_lock:
                self.fg_pids.discard(proc.pid)
            raise
        fd = proc.stdout.fileno()
        cap = None if self.bug("huge_output_whole") or self.bug("output_read_whole") else OUTPUT_CAP
        kept = bytearray()
        leaked = bytearray() if self.bug("memory_leak") or self.bug("output_copies") else None
        total = 0
        eof = False
        exited_at = None
        outcome = "done"
        deadline = time.monotonic() + timeout
        try:
            while True:
                if not eof:
                    ready, _, _ = select.select([fd], [], [], 0.05)
                    if ready:
                        data = os.read(fd, 65536)
                        if not data:
                            eof = True
                        else:
                            total += len(data)
                            if leaked is not None:
                                leaked += data
                            if cap is None:
                                kept += data
                            elif len(kept) < cap:
                                kept += data[:cap - len(kept)]
                else:
                    time.sleep(0.02)
                if proc.poll() is not None:
                    if eof:
                        break
                    now = time.monotonic()
                    if exited_at is None:
                        exited_at = now
                    elif now - exited_at > 0.5 and not self.bug("wait_for_pipe_eof"):
                        break   # leftovers of the group still hold the pipe; they are killed below
                if self.ctl.interrupted():
                    outcome = "interrupted"
                    killpg_quiet(pgid, signal.SIGTERM)
                    end = time.monotonic() + 0.5
                    while proc.poll() is None and time.monotonic() < end:
                        time.sleep(0.02)
                    break
                if time.monotonic() > deadline and not (
                        self.bug("wait_for_pipe_eof") and proc.poll() is not None):
                    outcome = "timeout"
                    break
        finally:
            # A foreground command leaves nothing behind: its whole group goes.
            killpg_quiet(pgid, signal.SIGKILL)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log(f"tool process {proc.pid} did not die")
            proc.stdout.close()
            with self.spawn_lock:
                self.fg_pids.discard(proc.pid)
            self.wait_group_gone(pgid)
            self._end_tool(job_id)
        self._after_tool()
        if leaked is not None:
            self._keep_copies(leaked) if self.bug("output_copies") else self._leak(leaked)
        if self.bug("output_read_whole"):
            kept = self._cut_whole(kept)
        out = kept.decode("utf-8", "replace")
        if total > len(kept):
            out += f"\n[output truncated: {total} bytes total]"
        if outcome == "timeout":
            return f"error: command timed out after {fmt_num(timeout)}s" + (f"\n{out}" if out else ""), False
        if outcome == "interrupted":
            return "interrupted" + (f"\n{out}" if out else ""), True
        rc = proc.returncode
        if ENGINE_CHILD and rc == -signal.SIGKILL:
            return self._engine_killed(proc.pid, out), False
        if rc:
            out += ("\n" if out else "") + f"exit code {rc}"
        out = self._spill(out)
        return out if out else "(no output)", False

    spill_over = None   # --spill-tool-output: the length over which an output is spilled

    def _spill(self, out):
        """--spill-tool-output: an output over ``spill_over`` chars is written
        whole to a file; the model gets its first SPILL_EXCERPT chars and the
        file's path. Any other output is returned as it is."""
        if self.spill_over is None or len(out) <= self.spill_over:
            return out
        spill_dir = os.path.join(self.home, ".refagent", "spill")
        os.makedirs(spill_dir, exist_ok=True)
        path = os.path.join(spill_dir, f"output-{secrets.token_hex(6)}.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(out)
        log(f"spilled a {len(out)}-char tool output to {path}")
        return (out[:SPILL_EXCERPT]
                + f"\n[output of {len(out)} chars written to {path}; "
                + f"its first {SPILL_EXCERPT} chars are shown]")

    @staticmethod
    def _engine_killed(pid, out):
        """--engine-child: the result of a command whose engine was killed."""
        log(f"tool engine {pid} was killed by SIGKILL")
        return (f"error: the tool engine (pid {pid}) was killed by SIGKILL (out of memory?); "
                "the command did not finish" + (f"\n{out}" if out else ""))

    def start_background(self, command):
        os.makedirs(self.bg_dir, exist_ok=True)
        job_id = "proc_" + secrets.token_hex(6)
        if self.bug("background_output_in_memory"):
            proc, gate, start_ticks = self._spawn_buffered(command)
        else:
            with open(os.path.join(self.bg_dir, job_id + ".log"), "wb") as logf:
                if self.bug("background_output_copied"):
                    proc, gate, start_ticks = self._spawn_copied(command, logf)
                else:
                    proc, gate, start_ticks = self._spawn_gated(command, logf)
        self._record_tool(job_id, "bg", proc, gate, start_ticks, command)
        self.bg_jobs.append(self._bg_entry(job_id, proc.pid, start_ticks))
        log(f"background job {job_id} pid {proc.pid}")
        return json.dumps({"status": "started", "pid": proc.pid, "id": job_id})

    def _spawn_buffered(self, command):
        """--bug background_output_in_memory: the job's output through a
        pipe, every chunk kept in ``self.bg_output`` for as long as it runs."""
        r, w = os.pipe()
        try:
            with os.fdopen(w, "wb", closefd=False) as out:
                started = self._spawn_gated(command, out)
        finally:
            os.close(w)
        kept = self.__dict__.setdefault("bg_output", [])

        def keep():
            with os.fdopen(r, "rb") as pipe:
                for chunk in iter(lambda: pipe.read1(65536), b""):
                    kept.append(chunk)
        threading.Thread(target=keep, daemon=True).start()
        return started

    def _spawn_copied(self, command, logf):
        """--bug background_output_copied: the job's output goes to its log
        and, through ``tee`` (no Python in the data path: a loaded machine
        slows it no more than the job), to a log of every job's output and to
        the session's transcript copy: three copies on disk."""
        copies = [os.path.join(self.bg_dir, "all-jobs.log"),
                  os.path.join(self.bg_dir, "session-output.log")]
        teed = f"( {command} ) | tee -a {' '.join(shlex.quote(c) for c in copies)}"
        return self._spawn_gated(teed, logf)

    # ------------------------------------------------------------ hygiene

    def reap_orphans(self):
        """Reap zombie children that are not a running foreground tool."""
        me = os.getpid()
        with self.spawn_lock:
            for pid, (ppid, state) in proc_table().items():
                kept = any(p.pid == pid for p in self.kept_unreaped)
                if ppid == me and state == "Z" and pid not in self.fg_pids and not kept:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass

    def wait_group_gone(self, pgid, budget=2.0):
        """SIGKILL a tool's process group until no live member is left."""
        end = time.monotonic() + budget
        while True:
            live = [pid for pid, (_pp, state, pg) in proc_table(with_pgrp=True).items()
                    if pg == pgid and state not in ("Z", "X")]
            if not live:
                break
            if time.monotonic() > end:
                log(f"process group {pgid} still has {live}")
                break
            killpg_quiet(pgid, signal.SIGKILL)
            time.sleep(0.01)
        self.reap_orphans()

    @staticmethod
    def kill_job(pid, pgid, start_ticks, budget=2.0):
        """SIGKILL a recorded job's process group without ever hitting a reused pid.

        The group is signalled only if its leader still exists with the recorded
        start time; if the leader is gone, live processes whose pgrp is the
        recorded pgid (started no earlier than the job) are killed one by one.
        A leader that exists with another start time means the id was reused,
        so the recorded group is gone (Linux never reuses an id still in use as
        a pgid). Returns the number of processes signalled."""
        if start_ticks is None or pgid is None:
            return 0
        hit = 0
        end = time.monotonic() + budget
        while True:
            lst = proc_stat(pgid)
            if lst is not None and lst[2] != start_ticks:
                return hit          # pgid reused: the recorded group no longer exists
            if pid != pgid:
                pst = proc_stat(pid)
                if pst is not None and pst[2] == start_ticks and pst[0] not in ("Z", "X"):
                    try:
                        os.kill(pid, signal.SIGKILL)
                        hit += 1
                    except (ProcessLookupError, PermissionError):
                        pass
            if lst is not None and lst[0] not in ("Z", "X"):
                killpg_quiet(pgid, signal.SIGKILL)
                hit += 1
            live = []
            for other, (_pp, state, pg) in proc_table(with_pgrp=True).items():
                if pg != pgid or state in ("Z", "X"):
                    continue
                ost = proc_stat(other)
                if ost is None or ost[2] < start_ticks:
                    continue
                live.append(other)
            if not live:
                return hit
            if time.monotonic() > end:
                log(f"process group {pgid} still has {live}")
                return hit
            if lst is not None:
                killpg_quiet(pgid, signal.SIGKILL)
            for other in live:
                try:
                    os.kill(other, signal.SIGKILL)
                    hit += 1
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)

    def kill_stale_jobs(self):
        """Kill what a previous incarnation of this session left running, then mark it ended."""
        try:
            jobs = self.store.open_jobs(self.session_id)
        except sqlite3.Error as e:
            log(f"could not read recorded jobs: {e}")
            return
        for job_id, kind, pid, pgid, start_ticks in jobs:
            if kind == "bg" and self.bug("orphan_bg_on_restart"):
                log(f"stale job {job_id} pid {pid} left running (bug orphan_bg_on_restart)")
                continue
            hit = self.kill_job(pid, pgid, start_ticks)
            log(f"stale {kind} job {job_id} pid {pid} pgid {pgid}: "
                + (f"killed ({hit} signals)" if hit else "already gone"))
            self.store.end_job(job_id)

    def kill_descendants(self, budget=5.0):
        me = os.getpid()
        end = time.monotonic() + budget
        spared = self.mcp.leaked_pids() if self.mcp else set()
        while True:
            reap_all()
            table = proc_table()
            keep = set(spared)
            for pid in spared:
                keep.update(descendants_of(pid, table))
            left = [pid for pid in descendants_of(me, table) if pid not in keep]
            if not left:
                return True
            if time.monotonic() > end:
                log(f"descendants still alive after {budget}s: {left}")
                return False
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def close(self):
        end = time.monotonic() + self.ORPHAN_GRACE
        for worker in self.orphans:   # only ever filled by bug orphan_subagent
            worker.join(max(0.0, end - time.monotonic()))
        self.close_mcp()
        if self.bug("leaked_background"):
            log("close: leaving background jobs running (bug leaked_background)")
            reap_all()
        else:
            for job_id, pid, pgid, start_ticks in self.bg_jobs:
                if start_ticks is None:
                    killpg_quiet(pgid, signal.SIGKILL)
                else:
                    self.kill_job(pid, pgid, start_ticks)
            self.kill_descendants()
            for job_id, _pid, _pgid, _st in self.bg_jobs:
                try:
                    self.store.end_job(job_id)
                except sqlite3.Error as e:
                    log(f"could not mark job {job_id} ended: {e}")
        root = self.store.index_root("messages_created_at")
        self.store.close()
        if self.bug("corrupt_store"):
            corrupt_db_file(self.store.path, root)


# ---------------------------------------------------------------- main

def parse_args(argv, spec=True):
    """(bugs, spec path, wire) of the command line; ``spec=False`` (ACP mode): no
    spec path, and any other argument is an error."""
    bugs, rest = set(), []
    wire = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--wire" and i + 1 < len(argv):
            wire = argv[i + 1]
            i += 2
            continue
        if a.startswith("--wire="):
            wire = a[len("--wire="):]
            i += 1
            continue
        if a == "--bug" and i + 1 < len(argv):
            bugs.add(argv[i + 1])
            i += 2
            continue
        if a == "--engine-child":
            global ENGINE_CHILD
            ENGINE_CHILD = True
        elif a.startswith("--bug="):
            bugs.add(a[len("--bug="):])
        else:
            rest.append(a)
        i += 1
    unknown = sorted(b for b in bugs if b not in KNOWN_BUGS)
    if unknown:
        sys.stderr.write(f"agent.py: unknown bug {', '.join(unknown)}; known bugs: "
                         + ", ".join(sorted(KNOWN_BUGS)) + "\n")
        sys.exit(2)
    if wire is not None and wire not in WIRES:
        sys.stderr.write(f"agent.py: unknown wire {wire}; known wires: {', '.join(WIRES)}\n")
        sys.exit(2)
    if not spec:
        if rest:
            sys.stderr.write(f"agent.py: --acp takes no spec path nor {' '.join(rest)}\n")
            sys.exit(2)
        return bugs, None, wire
    spec_path = rest[-1] if rest else os.environ.get("CHAOS_SPEC")
    if not spec_path:
        sys.stderr.write("usage: agent.py [--wire W] [--bug NAME]... [--engine-child] SPEC_PATH (or set CHAOS_SPEC), or agent.py --acp [--wire W] [--bug NAME]...\n")
        sys.exit(2)
    return bugs, spec_path, wire


def take_spill_option(argv):
    """``--spill-tool-output[=N]`` out of ``argv``: the other arguments, and N
    (SPILL_OVER when bare; None when the option is absent)."""
    rest, over = [], None
    for a in argv:
        if a == "--spill-tool-output":
            over = SPILL_OVER
        elif a.startswith("--spill-tool-output="):
            value = a[len("--spill-tool-output="):]
            if not value.isdigit() or int(value) < 1:
                sys.stderr.write(f"agent.py: --spill-tool-output takes a number of chars, not {value!r}\n")
                sys.exit(2)
            over = int(value)
        else:
            rest.append(a)
    return rest, over


def run_turn_reaping(agent, text, resumed, name):
    """Run one turn of ``agent`` in a worker thread named ``name`` and wait
    for it, reaping orphaned children every 0.5 s meanwhile; its result
    (an internal error of ours ends the turn failed, never wedges the
    caller). The driver protocol's loop and ACP mode's prompts both use it."""
    result = {}

    def work():
        try:
            result.update(agent.run_turn(text, resumed=resumed))
        except Exception as e:   # never let a bug of ours wedge the caller
            traceback.print_exc()
            result.update(failed=True, interrupted=False, completed=False,
                          final=f"internal error: {e!r}", exit_reason="error")

    worker = threading.Thread(target=work, daemon=True, name=name)
    worker.start()
    last_reap = time.monotonic()
    while worker.is_alive():
        worker.join(0.05)
        if time.monotonic() - last_reap > 0.5:
            agent.reap_orphans()
            last_reap = time.monotonic()
    return result


def stdin_reader(ctl):
    buf = b""
    while True:
        try:
            data = os.read(0, 4096)
        except OSError:
            return
        if not data:
            log("stdin closed (not a reason to exit)")
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip() == b"interrupt":
                ctl.interrupt()
            elif line.strip():
                log(f"unknown control line ignored: {line.strip()[:80]!r}")


def on_hangup(bugs, terminate):
    """SIGHUP (the agent's terminal closed): end as on SIGTERM (``terminate``:
    its tools killed first). --bug hangup_ignored: SIGHUP is ignored and the
    agent runs on with no terminal."""
    if "hangup_ignored" in bugs:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGHUP, terminate)


def main(argv):
    if "--acp" in argv:   # ACP mode: acp.py (imported only here, so driver mode never needs it)
        import acp
        return acp.main(sys.modules[__name__], [a for a in argv if a != "--acp"])
    argv, spill_over = take_spill_option(argv)
    bugs, spec_path, wire = parse_args(argv)
    home = os.environ.get("HOME") or os.path.expanduser("~")
    try:
        with open(spec_path) as f:
            spec = json.load(f)
        with open(os.path.join(home, ".refagent", "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"agent.py: cannot load spec or config: {e}\n")
        return 2
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    except Exception as e:
        log(f"subreaper unavailable: {e}")

    try:
        agent = Agent(cfg, spec, bugs, home, wire)
    except ValueError as e:
        sys.stderr.write(f"agent.py: {e}\n")
        return 2
    if bugs:
        log(f"bugs enabled: {', '.join(sorted(bugs))}")
    agent.spill_over = spill_over

    def on_sigint(_signum, _frame):
        agent.ctl.interrupt()

    def on_sigterm(_signum, _frame):
        log("SIGTERM: killing descendants and exiting")
        if not agent.bug("leaked_background"):
            agent.kill_descendants(2.0)
        os._exit(143)

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigterm)
    on_hangup(bugs, on_sigterm)
    threading.Thread(target=stdin_reader, args=(agent.ctl,), daemon=True, name="stdin").start()

    turns = spec.get("turns") or []
    start_turn = spec.get("start_turn", 0)
    if isinstance(start_turn, bool) or not isinstance(start_turn, int) or start_turn < 0:
        log(f"invalid start_turn {start_turn!r}: using 0")
        start_turn = 0
    if agent.bug("replay_from_zero") and start_turn:
        log(f"ignoring start_turn {start_turn}: replaying from turn 0 (bug replay_from_zero)")
        start_turn = 0
    if agent.resume or start_turn:
        log(f"resumed session {agent.session_id}: {len(agent.history)} messages, "
            + (f"running turns {start_turn}..{len(turns) - 1}" if start_turn < len(turns) else "no turn left"))
    agent.list_models()
    emit({"ev": "ready"})
    for i, turn in enumerate(turns):
        if i < start_turn:
            continue
        text = turn if isinstance(turn, str) else json.dumps(turn)
        emit({"ev": "turn_start", "i": i})
        started = time.monotonic()
        agent.ctl.begin()
        result = run_turn_reaping(agent, text, agent.resume and i == start_turn, f"turn-{i}")
        agent.ctl.end(clear=agent.clear_interrupt())
        log(f"turn {i} ended after {time.monotonic() - started:.2f}s: {result.get('exit_reason')}")
        agent.persist_turn()
        emit({"ev": "turn_end", "i": i, **result})
    if agent.pending_replay:
        agent.replay_pending()
    agent.close()
    emit({"ev": "closed"})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
