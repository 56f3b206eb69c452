"""chaosrun driver for Hermes Agent 0.19.0.

Speaks chaosrun's driver protocol (see DESIGN.md, "The driver protocol") over a
real ``run_agent.AIAgent`` persisting into a real ``hermes_state.SessionDB``:

    driver.py [ignored args...] SPEC_PATH        (or CHAOS_SPEC=SPEC_PATH)

stdout carries only ``CHAOS {json}`` lines; everything Hermes prints or logs goes
to stderr (file descriptor 1 is re-pointed at stderr before Hermes is imported,
so even subprocesses and C extensions cannot write onto the protocol channel).
A restart spec (``"resume": true, "start_turn": K``, written by chaosrun after
it SIGKILLs the agent) reloads the session's history from Hermes' SessionDB the
way ``hermes chat --resume`` does (see ``resume_session``) and runs only turns
K.., emitting their original indices. stdin carries control lines;
``interrupt`` calls ``AIAgent.interrupt()`` while a turn is running, the same
call Hermes' own CLI makes on Ctrl+C.

The agent is built the way ``hermes chat`` builds it
(hermes_cli/cli_agent_setup_mixin.py ``_init_agent``): config from
``hermes_cli.config.load_config``, provider/base_url/key from
``hermes_cli.runtime_provider.resolve_runtime_provider``, ``terminal.*`` config
bridged into the env vars the terminal tool reads, the CLI's toolsets, and
``task_id=session_id`` on every turn so background processes are registered under
the session that ``AIAgent.close()`` later cleans up.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback

# ── protocol channel ────────────────────────────────────────────────────────
# Keep a private handle on the real stdout, then make fd 1 (and sys.stdout) the
# stderr stream so nothing but our CHAOS lines can ever reach chaosrun's stdout.
_proto_fd = os.dup(1)  # non-inheritable: tool subprocesses never see it
os.dup2(2, 1)
_proto = os.fdopen(_proto_fd, "w", encoding="utf-8", buffering=1)
sys.stdout = sys.stderr
_proto_lock = threading.Lock()
STOPPING = threading.Event()  # set by SIGTERM/SIGHUP: start no further turn


def emit(ev: str, **fields) -> None:
    line = "CHAOS " + json.dumps({"ev": ev, **fields}, ensure_ascii=False, default=str)
    with _proto_lock:
        _proto.write(line + "\n")
        _proto.flush()


def log(msg: str) -> None:
    print(f"[chaos-driver] {msg}", file=sys.stderr, flush=True)


# ── spec ────────────────────────────────────────────────────────────────────


def load_spec() -> dict:
    path = sys.argv[-1] if len(sys.argv) > 1 else os.environ.get("CHAOS_SPEC", "")
    if not path:
        log("usage: hermes SPEC_PATH   (or set CHAOS_SPEC)")
        sys.exit(2)
    try:
        with open(path, encoding="utf-8") as fh:
            spec = json.load(fh)
    except (OSError, ValueError) as exc:
        log(f"cannot read spec {path!r}: {exc}")
        sys.exit(2)
    if not isinstance(spec, dict) or not isinstance(spec.get("turns"), list):
        log(f"spec {path!r} must be an object with a 'turns' list")
        sys.exit(2)
    return spec


# ── agent construction ──────────────────────────────────────────────────────


def _clarify(question: str, choices=None) -> str:
    return ("No user is available to answer. Pick the most reasonable default "
            "yourself and continue.")


def prune_mcp_config() -> None:
    """Drop the MCP keys chaosrun rendered empty from config.yaml.

    The profile registers the scenario's server with every transport's keys
    (``command``/``args`` and ``url``) and chaosrun renders the unused ones
    empty; Hermes picks HTTP whenever a ``url`` key exists
    (tools/mcp_tool.py ``MCPServerTask._is_http``), so empty keys go, and a
    server with neither (a row without ``mcp:``) goes entirely."""
    from hermes_constants import get_hermes_home
    import yaml

    path = get_hermes_home() / "config.yaml"
    try:
        cfg = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        log(f"config.yaml not pruned: {exc}")
        return
    servers = cfg.get("mcp_servers")
    if not isinstance(servers, dict):
        return
    for name in list(servers):
        conf = servers[name]
        if not isinstance(conf, dict):
            continue
        for key in ("command", "url"):
            if conf.get(key) == "":
                conf.pop(key)
        if conf.get("args") == [] and "command" not in conf:
            conf.pop("args")
        if "command" not in conf and "url" not in conf:
            servers.pop(name)
    if not servers:
        cfg.pop("mcp_servers")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    log(f"MCP servers: {json.dumps(servers)}")


def start_mcp() -> None:
    """Start MCP discovery and wait for it as ``hermes chat`` does:
    hermes_cli/main.py starts ``start_background_mcp_discovery`` at CLI startup
    and cli.py ``get_tool_definitions`` waits ``wait_for_mcp_discovery``
    (bounded by ``mcp_discovery_timeout``) before the tool list is built."""
    import logging

    from hermes_cli.mcp_startup import start_background_mcp_discovery, wait_for_mcp_discovery

    start_background_mcp_discovery(logger=logging.getLogger("chaos-driver"),
                                   thread_name="cli-mcp-discovery")
    wait_for_mcp_discovery()


def shutdown_mcp() -> None:
    """Stop MCP servers as the CLI's exit does (cli.py ``_run_cleanup``)."""
    try:
        from tools.mcp_tool import shutdown_mcp_servers

        shutdown_mcp_servers()
    except BaseException:
        log("shutdown_mcp_servers() raised:\n" + traceback.format_exc())


def build_agent(spec: dict):
    """Build AIAgent + SessionDB as ``hermes chat`` would, minus the TUI."""
    from hermes_cli.config import apply_terminal_config_to_env, load_config
    from hermes_cli.runtime_provider import resolve_runtime_provider
    from hermes_constants import get_hermes_home
    from hermes_state import SessionDB
    from run_agent import AIAgent

    prune_mcp_config()
    cfg = load_config() or {}
    start_mcp()

    # terminal.* (timeout, backend, ...) -> TERMINAL_* env, as cli.py does at import.
    apply_terminal_config_to_env()
    # Local backend: the CLI pins TERMINAL_CWD to its cwd; ours is the scenario workdir.
    os.environ["TERMINAL_CWD"] = os.getcwd()

    model_cfg = cfg.get("model")
    if isinstance(model_cfg, dict):
        model = model_cfg.get("default") or model_cfg.get("model") or ""
    else:
        model = str(model_cfg or "")

    agent_cfg = cfg.get("agent") if isinstance(cfg.get("agent"), dict) else {}
    try:
        max_turns = int(agent_cfg.get("max_turns") or 90)
    except (TypeError, ValueError):
        max_turns = 90

    runtime = resolve_runtime_provider()
    api_key = runtime.get("api_key")
    base_url = runtime.get("base_url")
    if not base_url:
        raise RuntimeError("Hermes resolved no base_url; check model.base_url in config.yaml")
    if not api_key:
        api_key = "no-key-required"  # what the CLI substitutes for custom endpoints

    try:
        from hermes_cli.tools_config import _get_platform_tools

        toolsets = sorted(_get_platform_tools(cfg, "cli"))
    except Exception as exc:  # pragma: no cover - defensive
        log(f"toolset resolution failed ({exc}); using config toolsets")
        toolsets = list(cfg.get("toolsets") or ["hermes-cli"])

    db = SessionDB(db_path=get_hermes_home() / "state.db")

    session_id = spec.get("session_id") or None
    history: list = []
    if spec.get("resume") is True:
        session_id, history = resume_session(db, session_id)
    agent = AIAgent(
        model=model,
        api_key=api_key,
        base_url=base_url,
        provider=runtime.get("provider"),
        api_mode=runtime.get("api_mode"),
        acp_command=runtime.get("command"),
        acp_args=list(runtime.get("args") or []),
        credential_pool=runtime.get("credential_pool"),
        max_iterations=max_turns,
        enabled_toolsets=toolsets,
        disabled_toolsets=agent_cfg.get("disabled_toolsets") or [],
        quiet_mode=True,
        session_id=session_id,
        platform="cli",
        session_db=db,
        # Nobody can answer a clarify question here; answer the way Hermes' own
        # one-shot mode does (hermes_cli/oneshot.py) so the turn does not stall.
        clarify_callback=_clarify,
    )
    log(
        f"agent built: model={model!r} provider={runtime.get('provider')!r} "
        f"base_url={base_url!r} api_mode={runtime.get('api_mode')!r} "
        f"max_iterations={max_turns} session_id={agent.session_id!r} toolsets={toolsets}"
    )
    return agent, db, history


def resume_session(db, session_id):
    """Load a session's history the way ``hermes chat --resume ID`` does
    (hermes_cli/cli_agent_setup_mixin.py:261-341, ``_init_agent``): look the
    session up, follow a compression chain to its tip
    (``SessionDB.resolve_resume_session_id``), load the model-fed history with
    ``SessionDB.get_messages_as_conversation(id, repair_alternation=True)``
    (hermes_state.py:4842), drop ``session_meta`` rows, and re-open the session
    row. Whatever repair Hermes applies on that path is Hermes' own; the driver
    adds none."""
    if not session_id:
        log("resume: the spec names no session_id; starting fresh")
        return session_id, []
    meta = db.get_session(session_id)
    if not meta:
        # The CLI refuses to start here (``Session not found``); an empty
        # history lets chaosrun report what Hermes persisted (nothing).
        log(f"resume: session {session_id!r} not found in state.db; starting fresh")
        return session_id, []
    try:
        resolved = db.resolve_resume_session_id(session_id)
    except Exception:
        resolved = session_id
    if resolved and resolved != session_id:
        log(f"resume: session {session_id!r} was compressed into {resolved!r}")
        session_id = resolved
    restored = db.get_messages_as_conversation(session_id, repair_alternation=True)
    restored = [m for m in restored if m.get("role") != "session_meta"]
    try:
        db._conn.execute(
            "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?",
            (session_id,),
        )
        db._conn.commit()
    except Exception:
        pass
    shape = [str(m.get("role")) + ("+calls" if m.get("tool_calls") else "") for m in restored]
    log(f"resume: session {session_id!r}: {len(restored)} message(s) restored: {shape}")
    return session_id, restored


# ── turns and control ───────────────────────────────────────────────────────


class Runner:
    def __init__(self, agent, turns: list, start_turn: int = 0, history=None):
        self.agent = agent
        self.turns = [str(t) for t in turns]
        self.start_turn = start_turn
        self.lock = threading.Lock()
        self.turn_running = False
        self.history: list = list(history or [])

    def stdin_loop(self) -> None:
        """Control lines; EOF just ends the loop (the turns keep running)."""
        for raw in sys.stdin:
            cmd = raw.strip()
            if not cmd:
                continue
            if cmd == "interrupt":
                with self.lock:
                    running = self.turn_running
                    if running:
                        # Same call as Hermes' CLI Ctrl+C handler (cli.py: agent.interrupt()).
                        self.agent.interrupt()
                log(f"control: interrupt ({'delivered' if running else 'ignored: no turn running'})")
            else:
                log(f"control: unknown line {cmd!r} ignored")
        log("control: stdin closed")

    def run_turn(self, i: int, message: str) -> None:
        with self.lock:
            self.turn_running = True
        emit("turn_start", i=i)
        started = time.monotonic()
        try:
            result = self.agent.run_conversation(
                user_message=message,
                conversation_history=list(self.history),
                task_id=self.agent.session_id,
            )
        except BaseException as exc:  # report, never crash the driver
            log("turn %d raised:\n%s" % (i, traceback.format_exc()))
            text = f"{type(exc).__name__}: {exc}"
            result = {"final_response": text, "failed": True, "completed": False,
                      "interrupted": False, "turn_exit_reason": f"exception({type(exc).__name__})"}
            if not isinstance(exc, Exception):
                raise
        finally:
            with self.lock:
                self.turn_running = False
                # An interrupt that landed after the turn finished must not leak
                # into the next turn (Hermes keeps a pending interrupt armed).
                try:
                    self.agent.clear_interrupt()
                except Exception:
                    pass
        if not isinstance(result, dict):
            result = {"final_response": str(result), "completed": True}

        msgs = result.get("messages")
        if isinstance(msgs, list) and msgs:
            self.history = list(msgs)
        else:
            # Hermes returned no transcript (e.g. a pre-flight failure): keep the
            # user turn so the multi-turn contract still holds for the probe.
            self.history = self.history + [{"role": "user", "content": message}]

        emit(
            "turn_end",
            i=i,
            failed=bool(result.get("failed")),
            interrupted=bool(result.get("interrupted")),
            completed=bool(result.get("completed")),
            final=str(result.get("final_response") or result.get("error") or ""),
            exit_reason=exit_reason(result),
        )
        log(f"turn {i} ended after {time.monotonic() - started:.2f}s: "
            f"api_calls={result.get('api_calls')} keys={sorted(result)}")

    def run(self) -> None:
        for i, message in enumerate(self.turns):
            if i < self.start_turn:
                continue  # ran in a previous incarnation (resume)
            if STOPPING.is_set():
                log(f"stopping on signal: turn {i} not started")
                return
            self.run_turn(i, message)


def exit_reason(result: dict) -> str:
    # finalize_turn() (agent/turn_finalizer.py) sets turn_exit_reason; several
    # early returns in agent/conversation_loop.py omit it, so synthesise one.
    reason = result.get("turn_exit_reason") or result.get("exit_reason")
    if reason:
        return str(reason)
    if result.get("interrupted"):
        return "interrupted"
    if result.get("failure_reason"):  # classified API error (agent/error_classifier.py)
        return f"failed({result['failure_reason']})"
    if result.get("error"):
        return f"error({str(result['error'])[:120]})"
    if result.get("failed"):
        return "failed"
    return "completed" if result.get("completed") else "unknown"


def install_signal_handlers(agent) -> None:
    """SIGTERM/SIGHUP as Hermes' one-shot CLI handles them (cli.py
    ``_signal_handler_q``): ``agent.interrupt()`` so the tool worker kills its
    process group, a grace window (HERMES_SIGTERM_GRACE, default 1.5 s), then
    leave. We also call ``close()`` (kills tracked background processes) before
    leaving, since ``os._exit`` skips the CLI's atexit cleanup. No ``closed``
    event is emitted on this path: the run was cut short from outside."""

    def handler(signum, _frame):
        STOPPING.set()
        log(f"received signal {signum}: interrupting, then exiting")
        try:
            agent.interrupt(f"received signal {signum}")
            try:
                grace = float(os.getenv("HERMES_SIGTERM_GRACE", "1.5"))
            except (TypeError, ValueError):
                grace = 1.5
            if grace > 0:
                time.sleep(grace)
            agent.close()
            shutdown_mcp()
        except Exception:
            log("signal cleanup raised:\n" + traceback.format_exc())
        finally:
            try:
                sys.stderr.flush()
            finally:
                os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def background_summary() -> str:
    """Diagnostic only: Hermes' background-process registry (tools/process_registry.py)."""
    try:
        from tools.process_registry import process_registry as reg

        with reg._lock:
            running = [(s.id, s.pid, s.task_id, s.exited) for s in reg._running.values()]
        return f"{len(running)} registered background process(es) {running}"
    except Exception as exc:
        return f"registry unavailable ({exc})"


def main() -> int:
    spec = load_spec()
    workdir = spec.get("workdir")
    if isinstance(workdir, str) and workdir and os.path.isdir(workdir):
        os.chdir(workdir)

    start_turn = spec.get("start_turn", 0)
    if isinstance(start_turn, bool) or not isinstance(start_turn, int) or start_turn < 0:
        log(f"invalid start_turn {start_turn!r}: using 0")
        start_turn = 0

    agent, db, history = build_agent(spec)
    install_signal_handlers(agent)
    if spec.get("resume") is True or start_turn:
        log(f"resumed: {len(history)} message(s) of history, running turns "
            f"{start_turn}..{len(spec['turns']) - 1}")
    runner = Runner(agent, spec["turns"], start_turn, history)
    threading.Thread(target=runner.stdin_loop, name="chaos-stdin", daemon=True).start()
    emit("ready")

    worker = threading.Thread(target=runner.run, name="chaos-turns", daemon=True)
    worker.start()
    worker.join()

    log("before close: " + background_summary())
    try:
        # Same teardown order as hermes_cli/oneshot.py (_run_agent's finally).
        agent.shutdown_memory_provider(list(runner.history))
    except Exception:
        log("shutdown_memory_provider() raised:\n" + traceback.format_exc())
    try:
        agent.close()
    except Exception:
        log("agent.close() raised:\n" + traceback.format_exc())
    shutdown_mcp()
    log("after close: " + background_summary())
    try:
        db.close()
    except Exception:
        log("SessionDB.close() raised:\n" + traceback.format_exc())
    emit("closed")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit:
        raise
    except BaseException:
        log("driver failed:\n" + traceback.format_exc())
        code = 1
    # Hermes may leave non-daemon helper threads behind; the protocol says the
    # process exits by itself once 'closed' is out, so do not wait for them.
    # Same exit as Hermes' own one-shot mode (hermes_cli/main.py
    # _exit_after_oneshot): flush, shut logging down, os._exit past finalizers.
    try:
        _proto.flush()
        sys.stderr.flush()
        import logging

        logging.shutdown()
    finally:
        os._exit(code)
