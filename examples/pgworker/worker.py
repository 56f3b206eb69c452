#!/usr/bin/env python3
"""chaosrun Postgres-backed reference worker: N processes run ONE conversation.

chaosrun (profile ``workers: N``) starts N copies of this worker, each with its own
spec (the single-agent spec plus ``"worker": k`` and ``"workers": N``), all on one
HOME and one Postgres store (``$CHAOS_PG_DSN``). The workers run the spec's turns
cooperatively: each turn is executed by exactly one worker, in order, and the
worker that executes turn i prints ``turn_start``/``turn_end`` for i. Every worker
prints ``ready`` once connected and ``closed`` once every turn is done (after
killing its own background jobs), then exits 0 by itself.

The model loop, the shell tool (its foreground and background runners, which
start every process behind a gate), timeouts, retries, the stale timeout,
interrupt handling and process-kill helpers are the reference agent's
(``examples/reference/agent.py``, imported); this file adds the store, the turn
leases and fencing, and overrides the agent's store hooks (``_record_tool``,
``_end_tool``, ``_after_tool``, ``_bg_entry``) so a tool is recorded under the
turn's fencing token.

Turn leases (table ``turns``, one row per (session_id, i))
  * claim: ``UPDATE turns SET state='running', token=token+1, lease_until=now+LEASE
    WHERE state='pending' OR (state='running' AND token=seen AND lease_until < now)``
    on the first turn that is not done (every earlier turn is done). The token is
    the fencing token of that claim. A running turn is taken over only when its
    owner process is dead, or when this worker has itself watched the same lease
    stay expired and unrenewed for a whole LEASE: after a freeze of every worker
    the wall clock says every lease expired, but the owner may just not have
    renewed yet.
  * the executing worker renews the lease every RENEW s (``... WHERE token=mine``);
    a renewal that matches no row means the turn was taken over: the turn is
    abandoned at once (its model call and tool are cut, no ``turn_end``).
  * every write of a claimed turn (message, tool process registration, the final
    ``state='done'``) is ONE statement that checks the token under ``FOR SHARE``
    of the turn row, so it serialises with a claim: once a claim has committed, a
    stale owner (SIGSTOPped past its lease, then SIGCONTed) can write nothing.
  * tool processes (foreground and background) start gated (agent.py's gate):
    the child waits on a pipe and only ``exec``s the command once its row (pid,
    pgid, start time, owner token) is committed under the token check. A stale owner's tool never
    runs its command; a registered one is found and killed by the fencer.

Taking a turn over (the previous owner died or froze past its lease)
  1. fence (every claim does, before it prints ``turn_start``): kill every
     not-ended ``bg_jobs`` row of the session whose owner token is not the turn's
     current token, or whose owner process is gone (pid + start time, as
     agent.py's ``kill_job``: a reused pid is never hit; a zombie is gone), then
     its group;
  2. repair: the last assistant message's tool calls without a result get
     ``interrupted: the previous worker died before this call returned; not
     re-run`` (never re-run: they may have had side effects);
  3. run the turn from the stored history (the user message is stored once, by
     the first owner).

Idle workers poll every POLL s; they also kill background jobs whose owner
process is gone (a worker SIGKILLed between turns). A worker restarted with
``resume: true`` kills what its previous incarnation left and reports a turn it
had finished but not yet reported (killed between the commit and the print).

Usage: ``worker.py SPEC_PATH`` (or ``$CHAOS_SPEC``); config
``$HOME/.pgworker/config.json``; store ``$CHAOS_PG_DSN``. Logs go to stderr.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import agent as ref  # noqa: E402  (the reference agent: definitions only at import)
from agent import (  # noqa: E402
    Interrupted, TurnFailed, TurnControl, emit, fmt_num, killpg_quiet, proc_start_ticks,
    stdin_reader, row_to_message, INTERRUPTED_FINAL, BREAKER_FINAL, PERSIST_CAP, PR_SET_CHILD_SUBREAPER,
)

try:
    import psycopg
except ImportError:  # pragma: no cover
    sys.stderr.write("pgworker: psycopg is missing; run examples/pgworker/setup.sh\n")
    sys.exit(2)

LEASE = 1.5            # s: a turn's lease
RENEW = 0.3            # s: renewal period of the executing worker
POLL = 0.1             # s: idle poll for a claimable turn
REPORT_GRACE = 2.0     # s: wait this long for a finished turn's owner to print its turn_end
DB_GIVE_UP = 60.0      # s: without any successful store operation, exit 1
TAKEOVER_RESULT = "interrupted: the previous worker died before this call returned; not re-run"
SCHEMA_LOCK = 0x63686173   # advisory lock key ("chas")

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS messages(
        id BIGSERIAL PRIMARY KEY,
        session_id TEXT NOT NULL,
        turn_i INTEGER,
        role TEXT NOT NULL,
        content TEXT,
        tool_call_id TEXT,
        tool_calls TEXT,
        active BOOLEAN NOT NULL DEFAULT true,
        worker INTEGER,
        token BIGINT,
        created_at DOUBLE PRECISION)""",
    "CREATE INDEX IF NOT EXISTS messages_session ON messages(session_id, id)",
    """CREATE TABLE IF NOT EXISTS turns(
        session_id TEXT NOT NULL,
        i INTEGER NOT NULL,
        text TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending',
        owner_worker INTEGER,
        owner_pid INTEGER,
        owner_start_ticks BIGINT,
        token BIGINT NOT NULL DEFAULT 0,
        claims INTEGER NOT NULL DEFAULT 0,
        lease_until TIMESTAMPTZ,
        result TEXT,
        breaker_opened BOOLEAN NOT NULL DEFAULT false,
        reported BOOLEAN NOT NULL DEFAULT false,
        finished_at TIMESTAMPTZ,
        PRIMARY KEY (session_id, i))""",
    """CREATE TABLE IF NOT EXISTS bg_jobs(
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        kind TEXT NOT NULL DEFAULT 'bg',
        turn_i INTEGER,
        owner_token BIGINT,
        owner_worker INTEGER,
        owner_pid INTEGER,
        owner_start_ticks BIGINT,
        pid INTEGER,
        pgid INTEGER,
        start_ticks BIGINT,
        started_at DOUBLE PRECISION,
        ended BOOLEAN NOT NULL DEFAULT false,
        command TEXT)""",
    "CREATE INDEX IF NOT EXISTS bg_jobs_session ON bg_jobs(session_id) WHERE NOT ended",
    """CREATE TABLE IF NOT EXISTS joined(
        session_id TEXT NOT NULL,
        worker INTEGER NOT NULL,
        PRIMARY KEY (session_id, worker))""",
]
JOIN_WAIT = 60.0       # s: a first start waits this long for every worker to join



def log(msg):
    try:
        sys.stderr.write(f"[pgworker {time.strftime('%H:%M:%S')} {os.getpid()}] {msg}\n")
        sys.stderr.flush()
    except Exception:
        pass


ref.log = log   # the reference agent's helpers log under our name


class Fenced(Exception):
    """This worker lost its turn (token superseded, or the store went away)."""


def owner_alive(pid, start_ticks):
    """The process `pid` started at `start_ticks` is running. A zombie (killed,
    not yet reaped by its parent) is not: the fence must not spare its jobs
    while chaosrun has still to reap and restart it."""
    if pid is None or start_ticks is None:
        return False
    st = ref.proc_stat(pid)
    return st is not None and st[2] == start_ticks and st[0] not in ("Z", "X")


# ---------------------------------------------------------------- store

class PgStore:
    """The shared Postgres store. Every claimed-turn write is token-checked."""

    def __init__(self, dsn, session_id, worker):
        self.dsn = dsn
        self.session_id = session_id
        self.worker = worker
        self.pid = os.getpid()
        self.start_ticks = proc_start_ticks(self.pid)
        self.lock = threading.Lock()
        self.conns = {}
        self.last_ok = time.monotonic()

    def conn(self, name="main"):
        with self.lock:
            c = self.conns.get(name)
            if c is not None and not c.closed and not c.broken:
                return c
            if c is not None:
                try:
                    c.close()
                except Exception:
                    pass
            c = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5,
                                application_name=f"pgworker-{self.worker}-{name}",
                                options="-c statement_timeout=15000 -c lock_timeout=10000"
                                        " -c idle_in_transaction_session_timeout=10000")
            self.conns[name] = c
            return c

    def q(self, sql, args=(), name="main"):
        """Run one statement (autocommit); returns the cursor."""
        try:
            cur = self.conn(name).execute(sql, args)
        except psycopg.Error:
            self.drop(name)
            raise
        self.last_ok = time.monotonic()
        return cur

    def drop(self, name):
        with self.lock:
            c = self.conns.pop(name, None)
        if c is not None:
            try:
                c.close()
            except Exception:
                pass

    def close(self):
        for name in list(self.conns):
            self.drop(name)

    # ---------------------------------------------------------- setup

    def ensure_schema(self, turns):
        c = self.conn()
        with c.transaction():
            c.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            for stmt in SCHEMA:
                c.execute(stmt)
            c.execute(
                "INSERT INTO turns(session_id, i, text)"
                " SELECT %s, x.n - 1, x.t FROM unnest(%s::text[]) WITH ORDINALITY AS x(t, n)"
                " ON CONFLICT (session_id, i) DO NOTHING",
                (self.session_id, turns))
        self.last_ok = time.monotonic()

    def join_all(self, workers, resume):
        """A first start: record this worker, then wait (bounded) until all
        `workers` of the session have, so the conversation starts once the
        whole cluster is up rather than while the last worker still boots (a
        fault aimed at the first turn's tool would otherwise miss it). A
        restarted worker joins a running cluster and does not wait."""
        self.q("INSERT INTO joined(session_id, worker) VALUES (%s, %s)"
               " ON CONFLICT DO NOTHING", (self.session_id, self.worker))
        if resume:
            return
        deadline = time.monotonic() + JOIN_WAIT
        while time.monotonic() < deadline:
            (n,) = self.q("SELECT count(*) FROM joined WHERE session_id = %s",
                          (self.session_id,)).fetchone()
            if n >= workers:
                return
            time.sleep(0.05)
        log(f"only some of {workers} workers joined within {JOIN_WAIT:.0f} s; starting anyway")

    # ---------------------------------------------------------- turns

    def next_turn(self):
        """(first not-done turn row or None, its predecessor row or None)."""
        rows = self.q(
            "SELECT i, state, owner_pid, owner_start_ticks, reported,"
            " EXTRACT(EPOCH FROM clock_timestamp() - finished_at), breaker_opened,"
            " token, lease_until, lease_until < clock_timestamp()"
            " FROM turns WHERE session_id = %s AND i >= COALESCE(("
            "   SELECT min(i) FROM turns WHERE session_id = %s AND state <> 'done'), 1 << 30) - 1"
            " ORDER BY i LIMIT 2", (self.session_id, self.session_id)).fetchall()
        first = prev = None
        for r in rows:
            if r[1] != "done":
                first = r
                break
            prev = r
        return first, prev

    def claim(self, i, seen_token=None):
        """Claim turn i; (token, claims, text) or None. A pending turn is
        claimed outright; a running one only if it still carries `seen_token`
        (the owner the caller judged dead) and its lease has expired."""
        return self.q(
            "UPDATE turns SET state = 'running', owner_worker = %s, owner_pid = %s,"
            " owner_start_ticks = %s, token = token + 1, claims = claims + 1,"
            " lease_until = clock_timestamp() + make_interval(secs => %s)"
            " WHERE session_id = %s AND i = %s"
            " AND (state = 'pending' OR (state = 'running' AND token = %s"
            "      AND lease_until < clock_timestamp()))"
            " RETURNING token, claims, text",
            (self.worker, self.pid, self.start_ticks, LEASE, self.session_id, i,
             seen_token)).fetchone()

    def renew(self, i, token):
        return self.q(
            "UPDATE turns SET lease_until = clock_timestamp() + make_interval(secs => %s)"
            " WHERE session_id = %s AND i = %s AND token = %s AND state = 'running'",
            (LEASE, self.session_id, i, token), name="lease").rowcount == 1

    def finish(self, i, token, result, breaker_opened):
        return self.q(
            "UPDATE turns SET state = 'done', result = %s, breaker_opened = %s,"
            " finished_at = clock_timestamp(), lease_until = NULL"
            " WHERE session_id = %s AND i = %s AND token = %s AND state = 'running'",
            (json.dumps(result), breaker_opened, self.session_id, i, token)).rowcount == 1

    def mark_reported(self, i):
        self.q("UPDATE turns SET reported = true WHERE session_id = %s AND i = %s",
               (self.session_id, i))

    def unreported_of_mine(self):
        """Turns a previous incarnation of this worker finished but did not report."""
        return self.q(
            "SELECT i, result, owner_pid, owner_start_ticks FROM turns"
            " WHERE session_id = %s AND state = 'done' AND NOT reported AND owner_worker = %s"
            " ORDER BY i", (self.session_id, self.worker)).fetchall()

    def prev_breaker(self, i):
        row = self.q("SELECT breaker_opened FROM turns WHERE session_id = %s AND i = %s",
                     (self.session_id, i - 1)).fetchone()
        return bool(row and row[0])

    # ---------------------------------------------------------- messages

    def load(self):
        rows = self.q(
            "SELECT role, content, tool_call_id, tool_calls FROM messages"
            " WHERE session_id = %s AND active ORDER BY id", (self.session_id,)).fetchall()
        return [row_to_message(*r) for r in rows]

    def last_message(self):
        return self.q("SELECT role, content, tool_calls, turn_i FROM messages"
                      " WHERE session_id = %s AND active ORDER BY id DESC LIMIT 1",
                      (self.session_id,)).fetchone()

    def has_user_message(self, i):
        return self.q("SELECT 1 FROM messages WHERE session_id = %s AND turn_i = %s AND role = 'user'"
                      " LIMIT 1", (self.session_id, i)).fetchone() is not None

    def add_fenced(self, i, token, msg):
        """Insert one message iff turn i is still ours (token); False if fenced."""
        content = msg.get("content")
        if isinstance(content, str) and len(content) > PERSIST_CAP:
            content = content[:PERSIST_CAP - 100] + "\n[truncated for storage]"
        tool_calls = msg.get("tool_calls")
        return self.q(
            "INSERT INTO messages(session_id, turn_i, role, content, tool_call_id, tool_calls,"
            " active, worker, token, created_at)"
            " SELECT %s, %s, %s, %s, %s, %s, true, %s, %s, %s FROM turns"
            " WHERE session_id = %s AND i = %s AND token = %s AND state = 'running' FOR SHARE",
            (self.session_id, i, msg["role"], content, msg.get("tool_call_id"),
             json.dumps(tool_calls) if tool_calls else None, self.worker, token, time.time(),
             self.session_id, i, token)).rowcount == 1

    # ---------------------------------------------------------- tool processes

    def add_job_fenced(self, i, token, job_id, kind, pid, start_ticks, command):
        return self.q(
            "INSERT INTO bg_jobs(id, session_id, kind, turn_i, owner_token, owner_worker, owner_pid,"
            " owner_start_ticks, pid, pgid, start_ticks, started_at, ended, command)"
            " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, false, %s FROM turns"
            " WHERE session_id = %s AND i = %s AND token = %s AND state = 'running' FOR SHARE",
            (job_id, self.session_id, kind, i, token, self.worker, self.pid, self.start_ticks,
             pid, pid, start_ticks, time.time(), command[:2000],
             self.session_id, i, token)).rowcount == 1

    def end_job(self, job_id):
        self.q("UPDATE bg_jobs SET ended = true WHERE id = %s", (job_id,))

    def open_jobs(self):
        return self.q(
            "SELECT j.id, j.kind, j.pid, j.pgid, j.start_ticks, j.owner_pid, j.owner_start_ticks,"
            " j.turn_i, j.owner_token, t.token"
            " FROM bg_jobs j LEFT JOIN turns t ON t.session_id = j.session_id AND t.i = j.turn_i"
            " WHERE j.session_id = %s AND NOT j.ended ORDER BY j.started_at",
            (self.session_id,)).fetchall()


# ---------------------------------------------------------------- worker

class Worker(ref.Agent):
    """The reference agent's loop and tools over the shared store, one claimed turn at a time."""

    def __init__(self, cfg, spec, home, dsn):   # noqa: super().__init__ opens SQLite: not called
        self.bugs = set()
        self.home = home
        self.session_id = str(spec.get("session_id") or "default")
        self.workdir = spec.get("workdir") or os.getcwd()
        self.worker = int(spec.get("worker", 0))
        self.workers = int(spec.get("workers", 1))
        self.resume = spec.get("resume") is True
        self.model = cfg.get("model", "gpt-4o-mini")
        self.api_key = cfg.get("api_key", "chaosrun")
        # The reference agent's key reader (ref.Agent.current_key): a
        # credentials file in HOME, else the config's key.
        self.credentials_path = os.path.join(home, ".refagent", "credentials")
        self._cached_key = None
        self.stale_timeout = float(cfg.get("stale_timeout", 30))
        self.request_timeout = float(cfg.get("request_timeout", 60))
        self.api_max_retries = int(cfg.get("api_max_retries", 2))
        self.max_turns = int(cfg.get("max_turns", 8))
        self.tool_timeout = float(cfg.get("tool_timeout", 60))
        url = ref.urllib.parse.urlsplit(cfg["base_url"].rstrip("/"))
        self.https = url.scheme == "https"
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or (443 if self.https else 80)
        self.path = (url.path or "") + "/chat/completions"
        self.ctl = TurnControl()
        self.breaker_open = False
        self.spawn_lock = threading.Lock()
        self.fg_pids = set()
        self.kept_unreaped = []   # ref.Agent.reap_orphans reads it (--bug zombie_children; none here)
        self.bg_jobs = []          # (id, pid, pgid, start_ticks, token) started by this process
        self.pending_replay = []
        self.history = []
        state_dir = os.path.join(home, ".pgworker")
        os.makedirs(state_dir, exist_ok=True)
        self.bg_dir = os.path.join(state_dir, "bg")
        self.store = PgStore(dsn, self.session_id, self.worker)
        self.turn_i = None         # the claimed turn and its fencing token
        self.token = None
        self.fenced = threading.Event()

    # ------------------------------------------------------------ fenced writes

    def _append(self, msg):
        try:
            ok = self.store.add_fenced(self.turn_i, self.token, msg)
        except psycopg.Error as e:
            raise Fenced(f"store error while writing: {e}")
        if not ok:
            raise Fenced(f"turn {self.turn_i} token {self.token} superseded")
        self.history.append(msg)

    # ------------------------------------------------------------ tools: agent.py's, over this store

    def _record_tool(self, job_id, kind, proc, w, start_ticks, command):
        """Record the gated process under our token, then let it run; Fenced if the turn is lost."""
        try:
            ok = self.store.add_job_fenced(self.turn_i, self.token, job_id, kind, proc.pid,
                                           start_ticks, command)
            err = None
        except psycopg.Error as e:
            ok, err = False, e
        if ok:
            try:
                os.write(w, b"go\n")
            except OSError:
                pass   # killed by a fencer meanwhile
            os.close(w)
            return job_id
        os.close(w)    # EOF: the gate exits without running the command
        killpg_quiet(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        raise Fenced(f"turn lost before {kind} tool could start" + (f" (store error: {err})" if err else ""))

    def _end_tool(self, job_id):
        try:
            self.store.end_job(job_id)
        except psycopg.Error as e:
            log(f"could not mark tool process ended: {e}")

    def _after_tool(self):
        if self.fenced.is_set():
            raise Fenced("turn lost while a tool ran")

    def _bg_entry(self, job_id, pid, start_ticks):
        # With the token that started it: close and fencing kill by token.
        return (job_id, pid, pid, start_ticks, self.token)

    # ------------------------------------------------------------ fencing

    def fence(self, why):
        """Kill every open tool process of the session whose owner lost its turn or is gone."""
        try:
            jobs = self.store.open_jobs()
        except psycopg.Error as e:
            log(f"fence ({why}): cannot read jobs: {e}")
            return 0
        n = 0
        for (job_id, kind, pid, pgid, start_ticks, owner_pid, owner_start, turn_i,
             owner_token, turn_token) in jobs:
            superseded = turn_token is not None and owner_token != turn_token
            gone = not owner_alive(owner_pid, owner_start)
            if not (superseded or gone):
                continue
            hit = self.kill_job(pid, pgid, start_ticks)
            n += 1
            log(f"fence ({why}): {kind} job {job_id} pid {pid} of turn {turn_i} token {owner_token}"
                f" ({'token superseded' if superseded else 'owner gone'}): "
                + (f"killed ({hit} signals)" if hit else "already gone"))
            try:
                self.store.end_job(job_id)
            except psycopg.Error as e:
                log(f"could not mark job {job_id} ended: {e}")
        self.reap_orphans()
        return n

    def kill_own_jobs(self, token=None):
        keep = []
        for job in self.bg_jobs:
            job_id, pid, pgid, start_ticks, tok = job
            if token is not None and tok != token:
                keep.append(job)
                continue
            if start_ticks is None:
                killpg_quiet(pgid, signal.SIGKILL)
            else:
                self.kill_job(pid, pgid, start_ticks)
            try:
                self.store.end_job(job_id)
            except psycopg.Error as e:
                log(f"could not mark job {job_id} ended: {e}")
        self.bg_jobs = keep

    def repair(self):
        for idx in range(len(self.history) - 1, -1, -1):
            m = self.history[idx]
            if m["role"] == "assistant" and m.get("tool_calls"):
                answered = {x.get("tool_call_id") for x in self.history[idx + 1:] if x["role"] == "tool"}
                missing = [tc for tc in m["tool_calls"] if tc.get("id") not in answered]
                if missing:
                    log(f"history: {len(missing)} tool call(s) of a previous owner without a result")
                for tc in missing:
                    self._append({"role": "tool", "tool_call_id": tc.get("id"), "content": TAKEOVER_RESULT})
                break

    # ------------------------------------------------------------ one claimed turn

    def run_claimed(self, i, text, claims):
        """Run claimed turn i (fenced at the claim): load, repair, then the reference loop.
        Returns (result, breaker)."""
        self.history = self.store.load()
        if self.store.has_user_message(i):
            last = self.store.last_message()
            if last and last[0] == "assistant" and not last[2] and last[3] == i:
                # The previous owner stored the final answer, then died before marking
                # the turn done: the turn is answered; do not ask the model again.
                log(f"turn {i}: the previous owner already stored the final answer")
                text = last[1] or ""
                return dict(failed=False, interrupted=False, completed=True,
                            final=text if text.strip() else "(empty answer)",
                            exit_reason="completed"), False
            self.repair()
        else:
            self._append({"role": "user", "content": text})
        if i > 0 and self.store.prev_breaker(i):
            log("breaker open: refusing turn")
            return dict(failed=True, interrupted=False, completed=False,
                        final=BREAKER_FINAL, exit_reason="breaker_open"), False
        had_success = False
        rounds = 0
        try:
            while True:
                if self.fenced.is_set():
                    raise Fenced("turn lost")
                if self.ctl.interrupted():
                    raise Interrupted()
                try:
                    reply_text, tool_calls = self.call_model()
                except TurnFailed as f:
                    if self.fenced.is_set():
                        raise Fenced("turn lost")
                    opened = f.all_stale and not had_success
                    if opened:
                        log("every attempt ended stale: opening breaker")
                    return dict(failed=True, interrupted=False, completed=False,
                                final=f.msg, exit_reason="provider_error"), opened
                had_success = True
                if tool_calls:
                    self._append({"role": "assistant", "content": reply_text or None,
                                  "tool_calls": tool_calls})
                    rounds += 1
                    if self.run_batch(tool_calls):
                        raise Interrupted()
                    if rounds >= self.max_turns:
                        return dict(failed=False, interrupted=False, completed=False,
                                    final=f"stopped: max turns ({self.max_turns}) reached",
                                    exit_reason="max_turns"), False
                    continue
                self._append({"role": "assistant", "content": reply_text})
                return dict(failed=False, interrupted=False, completed=True,
                            final=reply_text if reply_text.strip() else "(empty answer)",
                            exit_reason="completed"), False
        except Interrupted:
            if self.fenced.is_set():
                raise Fenced("turn lost")
            return dict(failed=False, interrupted=True, completed=False,
                        final=INTERRUPTED_FINAL, exit_reason="interrupted"), False

    def lose_turn(self, why):
        """Called by the lease keeper: stop the running turn at once."""
        if self.fenced.is_set():
            return
        log(f"turn {self.turn_i} token {self.token} lost: {why}")
        self.fenced.set()
        self.ctl.event.set()
        with self.ctl.lock:
            if self.ctl.sock is not None:
                try:
                    self.ctl.sock.shutdown(ref.socket.SHUT_RDWR)
                except OSError:
                    pass

    def execute(self, i, token, claims, text):
        """Run claimed turn i in a thread while this thread keeps the lease."""
        self.turn_i, self.token = i, token
        self.fenced.clear()
        # Fence before announcing the turn: a worker frozen (SIGSTOP) right after
        # `turn_start` must not leave a dead peer's background job writing into
        # the turn it announced.
        self.fence(f"claim of turn {i}" + (" (takeover)" if claims > 1 else ""))
        emit({"ev": "turn_start", "i": i})
        log(f"claimed turn {i} token {token} (claim #{claims})")
        started = time.monotonic()
        self.ctl.begin()
        box = {}

        def work():
            try:
                box["result"], box["breaker"] = self.run_claimed(i, text, claims)
            except Fenced as e:
                box["fenced"] = str(e)
            except psycopg.Error as e:
                box["fenced"] = f"store error: {e}"
            except Exception as e:   # never let a bug of ours wedge the turn
                traceback.print_exc()
                if self.fenced.is_set():
                    box["fenced"] = f"error after losing the turn: {e!r}"
                else:
                    box["result"] = dict(failed=True, interrupted=False, completed=False,
                                         final=f"internal error: {e!r}", exit_reason="error")
                    box["breaker"] = False

        th = threading.Thread(target=work, daemon=True, name=f"turn-{i}")
        th.start()
        last_renew = last_ok = last_reap = time.monotonic()
        while th.is_alive():
            th.join(0.05)
            now = time.monotonic()
            if now - last_renew >= RENEW and not self.fenced.is_set():
                last_renew = now
                try:
                    if self.store.renew(i, token):
                        last_ok = time.monotonic()
                    else:
                        self.lose_turn("lease taken over (token superseded)")
                except psycopg.Error as e:
                    log(f"lease renewal failed: {e}")
                    if time.monotonic() - last_ok > LEASE - 2 * RENEW:
                        self.lose_turn("lease could not be renewed in time")
            if now - last_reap > 0.5:
                self.reap_orphans()
                last_reap = now
        self.ctl.end(clear=True)
        if "fenced" in box or self.fenced.is_set():
            log(f"turn {i} abandoned after {time.monotonic() - started:.2f}s: {box.get('fenced', 'lease lost')}")
            self.kill_own_jobs(token)
            return
        result, breaker = box["result"], box.get("breaker", False)
        try:
            done = self.store.finish(i, token, result, breaker)
        except psycopg.Error as e:
            log(f"turn {i}: could not record the end: {e}")
            done = False
        if not done:
            log(f"turn {i} abandoned at its end: the turn was taken over")
            self.kill_own_jobs(token)
            return
        log(f"turn {i} ended after {time.monotonic() - started:.2f}s: {result.get('exit_reason')}")
        emit({"ev": "turn_end", "i": i, **result})
        try:
            self.store.mark_reported(i)
        except psycopg.Error as e:
            log(f"turn {i}: could not mark reported: {e}")

    # ------------------------------------------------------------ lifecycle

    def report_leftovers(self):
        """Print turn_end for turns a previous incarnation finished but died before reporting."""
        for i, result, owner_pid, owner_start in self.store.unreported_of_mine():
            if owner_pid == self.store.pid or owner_alive(owner_pid, owner_start):
                continue
            try:
                res = json.loads(result) if result else {}
            except ValueError:
                res = {}
            log(f"turn {i}: finished by my previous incarnation, not reported: reporting now")
            emit({"ev": "turn_end", "i": i, **res})
            self.store.mark_reported(i)

    def loop(self):
        last_fence = 0.0
        # (turn, token, lease_until) this worker saw expired, and when it first did.
        self.suspect = None
        while True:
            now = time.monotonic()
            if now - self.store.last_ok > DB_GIVE_UP:
                raise SystemExit(f"pgworker: no store operation succeeded for {DB_GIVE_UP:.0f}s")
            try:
                if now - last_fence > 0.5:
                    last_fence = now
                    self.fence("idle scan")
                first, prev = self.store.next_turn()
                if first is None:
                    return
                i = first[0]
                if prev is not None and not prev[4]:
                    # The previous turn's owner is about to print its turn_end: keep the
                    # merged stream in order unless it died or froze.
                    if owner_alive(prev[2], prev[3]) and (prev[5] or 0) < REPORT_GRACE:
                        time.sleep(0.02)
                        continue
                if first[1] == "running":
                    # Take a running turn over only from an owner that is dead, or
                    # whose lease this worker has itself watched stay expired and
                    # unrenewed for a whole lease: after a freeze of every worker
                    # the wall clock says every lease expired, but the owner may
                    # simply not have renewed yet.
                    key = (i, first[7], first[8])
                    if not first[9]:
                        self.suspect = None
                        time.sleep(POLL)
                        continue
                    dead = not owner_alive(first[2], first[3])
                    if self.suspect is None or self.suspect[0] != key:
                        self.suspect = (key, time.monotonic())
                    if not dead and time.monotonic() - self.suspect[1] < LEASE:
                        time.sleep(POLL)
                        continue
                    got = self.store.claim(i, seen_token=first[7])
                else:
                    got = self.store.claim(i)
            except psycopg.Error as e:
                log(f"store error: {e}")
                time.sleep(0.5)
                continue
            if got is None:
                self.reap_orphans()
                time.sleep(POLL)
                continue
            token, claims, text = got
            self.execute(i, token, claims, text)

    def close(self):
        self.kill_own_jobs()
        self.kill_descendants()
        try:
            self.fence("close")
        except Exception as e:
            log(f"close: fence failed: {e}")
        self.store.close()


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    spec_path = args[-1] if args else os.environ.get("CHAOS_SPEC")
    if not spec_path:
        sys.stderr.write("usage: worker.py SPEC_PATH (or set CHAOS_SPEC)\n")
        return 2
    home = os.environ.get("HOME") or os.path.expanduser("~")
    try:
        with open(spec_path) as f:
            spec = json.load(f)
        with open(os.path.join(home, ".pgworker", "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"pgworker: cannot load spec or config: {e}\n")
        return 2
    dsn = os.environ.get("CHAOS_PG_DSN")
    if not dsn:
        sys.stderr.write("pgworker: CHAOS_PG_DSN is not set (run scripts/postgres.sh)\n")
        return 2
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    except Exception as e:
        log(f"subreaper unavailable: {e}")

    turns = [t if isinstance(t, str) else json.dumps(t) for t in (spec.get("turns") or [])]
    w = Worker(cfg, spec, home, dsn)

    def on_sigint(_signum, _frame):
        w.ctl.interrupt()

    def on_sigterm(_signum, _frame):
        log("SIGTERM: killing descendants and exiting")
        w.kill_descendants(2.0)
        os._exit(143)

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigterm)
    threading.Thread(target=stdin_reader, args=(w.ctl,), daemon=True, name="stdin").start()

    deadline = time.monotonic() + 30
    while True:
        try:
            w.store.ensure_schema(turns)
            break
        except psycopg.Error as e:
            if time.monotonic() > deadline:
                sys.stderr.write(f"pgworker: cannot set up the store at {dsn!r}: {e}\n")
                return 1
            log(f"store not ready: {e}")
            time.sleep(0.5)
    log(f"worker {w.worker}/{w.workers} session {w.session_id}: {len(turns)} turns"
        + (" (resumed)" if w.resume else ""))
    # What a previous incarnation (or any dead worker) left running goes first.
    w.fence("startup")
    emit({"ev": "ready"})
    try:
        w.store.join_all(w.workers, w.resume)
    except psycopg.Error as e:
        log(f"could not join the other workers: {e}")
    try:
        w.report_leftovers()
    except psycopg.Error as e:
        log(f"could not report leftovers: {e}")
    w.loop()
    w.close()
    emit({"ev": "closed"})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
