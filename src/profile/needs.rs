//! What a scenario row needs from the adapter profile (an MCP client on the
//! row's transport, a mapped subagent or write_file tool, mapped tool arguments, an agent
//! that resumes after a kill), and the one rule for a profile that lacks it:
//! the row is `N/A` for that agent, with the reason and a one-line hint,
//! never an exit 2 for the whole table and never a silent pass. An optional
//! argument the profile does not map (`timeout`) is dropped from the call
//! with a run warning instead.

use crate::mcp::McpSupport;
use crate::profile::Profile;
use crate::provider::ToolCallSpec;
use crate::scenarios::Scenario;

/// Logical tools whose meaning depends on the profile's mapping: a row that
/// calls one the profile does not map is N/A. (Any other name, `shell`
/// included, is sent as written when unmapped: a literal tool name.)
pub const MAPPED_TOOLS: &[(&str, &str)] = &[
    (
        "subagent",
        "add `tools: {subagent: {name: Task, args: {prompt: prompt}}}` naming the agent's own subagent tool, or leave it out if the agent has none",
    ),
    (
        "write_file",
        "add `tools: {write_file: {name: Write, args: {path: file_path, content: content}}}` naming the agent's own tool that writes a whole file, or leave it out if the agent has none",
    ),
];

use crate::provider::OPTIONAL_ARGS;

/// Why `s` does not apply to `profile` (N/A, not run), with a hint, if so.
pub fn not_applicable(profile: &Profile, s: &Scenario) -> Option<String> {
    if let Some((adapted, _)) = adapt(profile, s) {
        return not_applicable(profile, &adapted);
    }
    acp_gap(profile, s)
        .or_else(|| mcp_gap(profile, s))
        .or_else(|| tool_call_gap(profile, s))
        .or_else(|| code_tool_gap(profile, s))
        .or_else(|| {
            tool_gaps(profile, s)
                .into_iter()
                .find(|g| !g.optional)
                .map(|g| g.reason)
        })
        .or_else(|| resume_gap(profile, s))
        .or_else(|| store_gap(profile, s))
        .or_else(|| damage_gap(profile, s))
        .or_else(|| after_answer_gap(profile, s))
        .or_else(|| credential_gap(profile, s))
        .or_else(|| sandbox_gap(profile, s))
}

/// A row that faults the ACP client side (`client:` rules), or sends a
/// prompt while a turn runs (`queue_prompt`), needs the ACP drive: under the driver protocol or exec mode chaosrun serves no client
/// side, so the fault could never land.
fn acp_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    if s.queue_prompt.is_some() && profile.acp.is_none() {
        return Some(
            "needs the ACP drive: the row sends a prompt while a turn runs (`queue_prompt`), \
             which only an `acp:` profile's session takes; run it with the agent's ACP profile \
             (`--agent NAME-acp`)"
                .to_string(),
        );
    }
    (!s.client.is_empty() && profile.acp.is_none()).then(|| {
        "needs the ACP drive: the row faults the ACP client side (`client:`), which only an \
         `acp:` profile has; run it with the agent's ACP profile (`--agent NAME-acp`)"
            .to_string()
    })
}

/// A row that asks the agent to turn on its own sandbox needs a profile
/// that renders `{{agent_sandbox}}` somewhere the agent reads it (a home
/// file, an `env:` value, the command or an exec argument): without it the
/// agent would run its tools as on every other row, and a pass would claim
/// a sandbox that never ran.
fn sandbox_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    s.agent_sandbox.as_ref()?;
    let uses = |t: &String| crate::template::uses(t, "agent_sandbox");
    let rendered = profile.home_files.iter().any(|f| uses(&f.template))
        || profile.env.values().any(uses)
        || profile.command.iter().any(uses)
        || profile.exec.as_ref().is_some_and(|e| {
            [&e.first, &e.next, &e.resume]
                .iter()
                .any(|a| a.iter().any(uses))
        });
    (!rendered).then(|| {
        "the profile declares no sandbox of its own: no template renders `{{agent_sandbox}}`; \
         render it into the agent's sandbox setting (e.g. `\"sandbox\": {{agent_sandbox}}` in its \
         config, or `{{agent_sandbox | choose: \"--sandbox=on\", \"--no-sandbox\"}}` as an argument)"
            .to_string()
    })
}

/// A row whose credential expires needs a way to hand the agent the new
/// key: a home file that renders `{{api_key}}` (rewritten on the refresh),
/// or, for a refresh when the turn ends, an exec-mode `env:` value or
/// argument (rendered again for the next turn's process). A key refreshed
/// mid-turn (`at_refusal`) can only be re-read from a file.
fn credential_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    use crate::provider::credential::Refresh;
    let spec = s.credential.as_ref()?;
    let uses = |t: &String| crate::template::uses(t, "api_key");
    let in_file = profile.home_files.iter().any(|f| uses(&f.template));
    let in_exec = profile.exec.as_ref().is_some_and(|e| {
        profile.env.values().any(uses)
            || [&e.first, &e.next, &e.resume]
                .iter()
                .any(|a| a.iter().any(uses))
    });
    match spec.refresh {
        Refresh::Never => None,
        Refresh::TurnEnd if in_file || in_exec => None,
        Refresh::AtRefusal if in_file => None,
        Refresh::AtRefusal if in_exec => Some(
            "the row refreshes the key mid-turn, which an exec turn's `env:` or argument cannot \
             carry into a running process; render `{{api_key}}` in a `home_files` file the \
             agent re-reads on a 401"
                .to_string(),
        ),
        _ => Some(
            "the row's credential expires and is refreshed, but no `home_files` template renders \
             `{{api_key}}` (nor, in exec mode, an `env:` value or `exec` argument); write the key \
             where the agent reads it, e.g. `home_files: [{path: .agent/credentials, template: \
             \"{{api_key}}\"}]`, and have the agent send it"
                .to_string(),
        ),
    }
}

/// Run-wide warnings about the selected rows (an optional argument dropped
/// because the profile does not map it), each once.
pub fn warnings(profile: &Profile, scenarios: &[Scenario]) -> Vec<String> {
    let mut out: Vec<String> = match code_tool_note(profile, scenarios) {
        Some(note) => vec![note],
        None => unmapped_mcp_probe(profile, scenarios).into_iter().collect(),
    };
    for s in scenarios {
        if not_applicable(profile, s).is_some() {
            continue;
        }
        for g in tool_gaps(profile, s).into_iter().filter(|g| g.optional) {
            if !out.contains(&g.reason) {
                out.push(g.reason);
            }
        }
    }
    out
}

/// A profile that registers the chaos MCP server but maps no
/// `tools.mcp_probe`, with rows that call it: said once at load (those rows
/// end in ERROR naming the tool the agent offered).
fn unmapped_mcp_probe(profile: &Profile, scenarios: &[Scenario]) -> Option<String> {
    let calls = |s: &Scenario| s.mcp.is_some() && tool_calls(s).any(|c| c.tool == "mcp_probe");
    let declared = matches!(profile.mcp, McpSupport::Transports(_));
    (declared && !profile.tools.contains_key("mcp_probe") && scenarios.iter().any(calls)).then(|| {
        "the profile registers the MCP server (`mcp.transports`) but maps no `tools.mcp_probe`: \
         MCP rows would ask for a tool literally named `mcp_probe`; add `tools: {mcp_probe: {name: \
         <the agent's name for the chaos server's probe tool>}}` (each such row's ERROR names the \
         tool the agent offered)"
            .to_string()
    })
}

/// The logical tools a row expects the agent to have (a row's call to a
/// name outside these, `no_such_tool_chaos`, asks about a tool no agent
/// has, which a `code_tool` agent must answer like any other).
const LOGICAL_TOOLS: &[&str] = &["shell", "mcp_probe", "subagent", "write_file"];

/// An agent whose tools live inside its code-execution tool (`code_tool`)
/// cannot run a row whose model asks for a tool by a name the profile does
/// not map to one the agent offers: chaosrun scripts calls by name, and no
/// mapping would make the agent run code that calls the tool.
fn code_tool_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    let code = profile.code_tool.as_deref()?;
    let call = tool_calls(s).find(|c| {
        LOGICAL_TOOLS.contains(&c.tool.as_str()) && !profile.tools.contains_key(&c.tool)
    })?;
    Some(format!(
        "the profile says the agent's tools live inside its code-execution tool `{code}` \
         (`code_tool`), and this row's model asks for `{}` by name, which the agent does not \
         offer as a tool of its own: a scripted call cannot reach a function inside code \
         (no `tools:` mapping would)",
        call.tool
    ))
}

/// Said once at load for a `code_tool` agent: how many selected rows are
/// N/A because their model calls a tool by name.
fn code_tool_note(profile: &Profile, scenarios: &[Scenario]) -> Option<String> {
    let code = profile.code_tool.as_deref()?;
    let n = scenarios
        .iter()
        .filter(|s| mcp_gap(profile, s).is_none() && tool_call_gap(profile, s).is_none())
        .filter(|s| code_tool_gap(profile, s).is_some())
        .count();
    (n > 0).then(|| {
        format!(
            "the agent's tools live inside its code-execution tool `{code}` (`code_tool`): {n} \
             selected row(s) whose model calls a tool by name are N/A; the rows without a tool \
             call run as usual"
        )
    })
}

/// An agent that offers the model no tools (`tool_calls: false`) cannot run
/// a row whose model asks for a tool call: the call would be text it never
/// acts on, and the row's checks would judge a call that was never made.
fn tool_call_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    let asks = tool_calls(s).next()?;
    (!profile.tool_calls).then(|| {
        format!(
            "the profile says `tool_calls: false` (the agent offers the model no tools and acts \
             through its reply's text), and this row's model asks for a tool call (`{}`)",
            asks.tool
        )
    })
}

fn mcp_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    let m = s.mcp.as_ref()?;
    match &profile.mcp {
        McpSupport::None => Some("profile declares no MCP (`mcp: false`)".to_string()),
        McpSupport::Undeclared => Some(
            "profile has no `mcp:` key; add `mcp: {transports: [stdio]}` (or http) and register \
             the server with {{mcp_command}}/{{mcp_args_json}} or {{mcp_url}}, or `mcp: false`"
                .to_string(),
        ),
        McpSupport::Transports(t) if m.transport_for(t).is_none() => {
            let pinned = m.transport.map_or("?", crate::mcp::Transport::name);
            Some(format!(
                "row pins MCP transport `{pinned}`, profile registers only {}; add `{pinned}` to \
                 `mcp.transports` and the agent's config",
                t.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
            ))
        }
        McpSupport::Transports(_) if profile.mcp_upstream.is_some() && m.upstream.is_none() => {
            m.needs_own_server()
        }
        McpSupport::Transports(_) if m.restart.is_some() && profile.exec.is_some() => Some(
            "this row restarts the MCP server between turns (`mcp.restart`); in exec mode each \
             turn's process connects anew, so no connection outlives a turn to be lost: run it \
             under the driver protocol or over ACP (`--agent NAME-acp`)"
                .to_string(),
        ),
        McpSupport::Transports(_) => None,
    }
}

fn resume_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    let kills = s.chaos.as_ref().is_some_and(|c| c.kill_share > 0.0)
        || s.process_fault.as_ref().is_some_and(|f| f.kills());
    (kills && !profile.resume).then(|| {
        "the adapter profile declares `resume: false`; this scenario kills the agent and needs it to resume".to_string()
    })
}

/// A kill aimed at a store write watches the store's files: it needs a
/// SQLite store (`store: {path: ...}`: the database, its write-ahead log and
/// journal) or JSONL transcripts (`store: {jsonl: ...}`).
fn store_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    let aimed = s
        .process_fault
        .as_ref()
        .is_some_and(|f| matches!(f.at, crate::scenarios::Trigger::StoreWriteAfterCalls(_)))
        || matches!(
            s.interrupt,
            Some(crate::scenarios::Trigger::StoreWriteAfterCalls(_))
        );
    let files = profile
        .store
        .as_ref()
        .is_some_and(|st| st.path.is_some() || st.jsonl.is_some());
    (aimed && !files).then(|| {
        "this row aims its fault at a write to the agent's store (`store_write_after_calls`); the adapter profile declares no SQLite (`store: {path: ...}`) or JSONL (`store: {jsonl: ...}`) store (a Postgres store is not watched)".to_string()
    })
}

/// `store_damage` cuts, pads and fuses records of a JSONL transcript: a
/// SQLite or Postgres store has no such records (its torn tail is the
/// database's own recovery, not the agent's resume).
fn damage_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    let jsonl = profile.store.as_ref().is_some_and(|st| st.jsonl.is_some());
    (s.store_damage.is_some() && !jsonl).then(|| {
        "this row damages the agent's JSONL transcript between turns (`store_damage`); the adapter profile declares no JSONL store (`store: {jsonl: ...}`): a SQLite or Postgres store has no records to cut, pad or fuse".to_string()
    })
}

/// A fault timed `at: after_answer` lands on the agent between turns: in
/// exec mode there is none (each turn's process has exited by its answer).
fn after_answer_gap(profile: &Profile, s: &Scenario) -> Option<String> {
    let after = s
        .process_fault
        .as_ref()
        .is_some_and(|f| f.at == crate::scenarios::Trigger::AfterAnswer);
    (after && profile.exec.is_some()).then(|| {
        "this row's fault lands just after the answer (`after_answer`); in exec mode the turn's process has exited by then, so nothing is left to fault".to_string()
    })
}

/// One thing a row's tool calls need that the profile does not map.
struct Gap {
    reason: String,
    /// An optional argument (dropped with a warning), not a reason for N/A.
    optional: bool,
}

/// Every tool call the row's responder can issue.
fn tool_calls(s: &Scenario) -> impl Iterator<Item = &ToolCallSpec> {
    s.responder.iter().flat_map(|r| r.reply.tool_calls())
}

fn tool_gaps(profile: &Profile, s: &Scenario) -> Vec<Gap> {
    let mut gaps = Vec::new();
    for call in tool_calls(s) {
        let Some(mapping) = profile.tools.get(&call.tool) else {
            if let Some((_, hint)) = MAPPED_TOOLS.iter().find(|(t, _)| *t == call.tool) {
                gaps.push(Gap {
                    reason: format!("profile maps no `{}` tool; {hint}", call.tool),
                    optional: false,
                });
            }
            continue;
        };
        // An empty `args` map passes every argument under its logical name.
        let Some(args) = call.args.as_object().filter(|_| !mapping.args.is_empty()) else {
            continue;
        };
        for key in args.keys().filter(|k| !mapping.args.contains_key(*k)) {
            let optional = OPTIONAL_ARGS.contains(&key.as_str());
            let what = format!(
                "profile's `tools.{}` (the agent's `{}`) maps no `{key}` argument",
                call.tool, mapping.name
            );
            gaps.push(Gap {
                reason: if optional {
                    format!("{what}; rows that pass it send the call without it (the agent's default applies)")
                } else {
                    format!("{what}; add `{key}: <the agent's argument>` to `tools.{}.args` if the tool has one", call.tool)
                },
                optional,
            });
        }
    }
    gaps
}

/// A row whose tool-call replies mix calls the profile can make with
/// `background: true` calls it cannot (its tool maps no `background`
/// argument): those calls dropped, the rest of the row kept (a soak is not
/// lost for one call), and the note that says so. `None` when nothing needs
/// dropping, or when a reply would be left with no call (then the row is
/// N/A, [`not_applicable`]).
pub fn adapt(profile: &Profile, s: &Scenario) -> Option<(Scenario, String)> {
    let mut out = s.clone();
    let mut dropped = Vec::new();
    for (i, rule) in out.responder.iter_mut().enumerate() {
        let Some(calls) = rule.reply.tool_calls_mut() else {
            continue;
        };
        let (cannot, can): (Vec<_>, Vec<_>) = calls
            .drain(..)
            .partition(|c| unbackgroundable(profile, c).is_some());
        if can.is_empty() {
            return None;
        }
        let whys: Vec<String> = cannot
            .iter()
            .filter_map(|c| unbackgroundable(profile, c))
            .collect();
        if let Some(why) = whys.first() {
            out.dropped_calls
                .push(crate::scenarios::schema::DroppedCalls {
                    rule: i,
                    count: whys.len(),
                    why: why.clone(),
                });
        }
        dropped.extend(whys);
        *calls = can;
    }
    dropped.dedup();
    let why = dropped.first()?;
    let note = format!(
        "{}: its `background: true` call(s) dropped from the replies that also make other calls ({why}); the rest of the row runs",
        s.id
    );
    Some((out, note))
}

/// Why `call` is a background call `profile` cannot make, if it is one.
fn unbackgroundable(profile: &Profile, call: &ToolCallSpec) -> Option<String> {
    let background = call.args.get("background").is_some_and(|b| b != false);
    let mapping = profile.tools.get(&call.tool)?;
    let unmapped = !mapping.args.is_empty() && !mapping.args.contains_key("background");
    (background && unmapped).then(|| {
        format!(
            "the profile's `tools.{}` (the agent's `{}`) maps no `background` argument",
            call.tool, mapping.name
        )
    })
}

/// Why a background shell step cannot be expressed for `profile` (its shell
/// tool maps no `background` argument), or `None` when it can: explore draws
/// no background steps for such an agent instead of erroring every such trial.
pub fn background_gap(profile: &Profile) -> Option<String> {
    const ROW: &str = "scenarios:\n  - id: bg\n    responder:\n      - reply: {kind: tool_call, calls: [{tool: shell, args: {command: x, background: true, timeout: 3}}]}\n    expect: ended\n";
    let table = crate::scenarios::load_str(ROW, "explore").ok()?;
    not_applicable(profile, table.scenarios.first()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolMapping;

    fn row(yaml: &str) -> Scenario {
        let table = format!("scenarios:\n{yaml}");
        crate::scenarios::load_str(&table, "t.yaml")
            .unwrap()
            .scenarios
            .remove(0)
    }

    /// (logical tool, the agent's name, (logical arg, the agent's arg)...)
    type Tools<'a> = &'a [(&'a str, &'a str, &'a [(&'a str, &'a str)])];

    fn profile(tools: Tools<'_>, mcp: McpSupport) -> Profile {
        let mut p = Profile {
            source: "p.yaml".into(),
            command: vec!["agent".into()],
            env: Default::default(),
            home_files: vec![],
            store: None,
            tools: Default::default(),
            background: None,
            breaker: false,
            logs: vec![],
            workers: 1,
            version_cmd: vec![],
            resume: true,
            tool_calls: true,
            aux_calls: vec![],
            code_tool: None,
            wire: Default::default(),
            exec: None,
            acp: None,
            dir: Default::default(),
            upstream: None,
            mcp,
            mcp_upstream: None,
            network: Default::default(),
            allow_setns: false,
            tty: false,
            unmapped_knobs: Vec::new(),
            renders_retries: false,
        };
        for (logical, name, args) in tools {
            p.tools.insert(
                logical.to_string(),
                ToolMapping {
                    name: name.to_string(),
                    args: args
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.to_string(),
                                crate::provider::ArgMap::Rename(v.to_string()),
                            )
                        })
                        .collect(),
                    fixed: Default::default(),
                },
            );
        }
        p
    }

    const BG_ROW: &str = "  - id: bg\n    responder:\n      - reply: {kind: tool_call, calls: [{tool: shell, args: {command: x, background: true, timeout: 3}}]}\n    expect: ended\n";
    const MCP_ROW: &str = "  - id: m\n    mcp: {transport: http}\n    responder:\n      - reply: {kind: text, text: hi}\n    expect: ended\n";
    const SUB_ROW: &str = "  - id: s\n    responder:\n      - reply: {kind: tool_call, calls: [{tool: subagent, args: {prompt: go}}]}\n    expect: ended\n";

    /// A row whose MCP server restarts between turns needs a long-lived
    /// agent: in exec mode each turn's process connects anew (N/A, naming
    /// the drives that run it); under the driver protocol it runs.
    #[test]
    fn a_restart_row_is_not_applicable_in_exec_mode() {
        const RESTART: &str = "  - id: r\n    mcp: {restart: turn_end}\n    responder:\n      - reply: {kind: text, text: hi}\n    expect: ended\n";
        let mut p = profile(
            &[],
            McpSupport::Transports(vec![crate::mcp::Transport::Stdio]),
        );
        assert_eq!(not_applicable(&p, &row(RESTART)), None);
        p.exec = Some(
            serde_yaml::from_str("first: [a, \"{{message}}\"]\nfinal: {last_line: true}\n")
                .unwrap(),
        );
        let why = not_applicable(&p, &row(RESTART)).expect("N/A in exec mode");
        assert!(
            why.contains("`mcp.restart`") && why.contains("--agent NAME-acp"),
            "{why}"
        );
    }

    /// A row like `chaos_soak`, whose reply makes a side-effect call and a
    /// background call: for a profile that cannot make the background call,
    /// that call is dropped (with a note) and the row runs, never N/A as a
    /// whole; a reply of background calls only still makes the row N/A.
    #[test]
    fn a_background_call_beside_others_is_dropped_not_the_row() {
        const SOAK: &str = "  - id: soak\n    responder:\n      - reply: {kind: tool_call, calls: [{tool: shell, args: {command: a}}, {tool: shell, args: {command: b, background: true}}]}\n      - reply: {kind: text, text: done}\n    expect: ended\n";
        let p = profile(
            &[("shell", "exec_command", &[("command", "cmd")])],
            McpSupport::None,
        );
        let soak = row(SOAK);
        assert_eq!(not_applicable(&p, &soak), None);
        let (adapted, note) = adapt(&p, &soak).expect("adapted");
        let calls = adapted.responder[0].reply.tool_calls();
        assert_eq!(calls.len(), 1);
        // What was dropped is saved with the row, for the oracle.
        assert_eq!(adapted.dropped_calls.len(), 1);
        assert_eq!(
            (
                adapted.dropped_calls[0].rule,
                adapted.dropped_calls[0].count
            ),
            (0, 1)
        );
        assert!(soak.dropped_calls.is_empty());
        assert_eq!(calls[0].args["command"], "a");
        assert!(
            note.starts_with("soak: its `background: true` call(s) dropped"),
            "{note}"
        );
        assert!(
            note.contains("`tools.shell` (the agent's `exec_command`) maps no `background`"),
            "{note}"
        );
        // Only background calls: nothing to keep, the row is N/A.
        assert!(adapt(&p, &row(BG_ROW)).is_none());
        assert!(not_applicable(&p, &row(BG_ROW)).is_some());
        // A profile that maps `background` runs the row as written.
        let mapped = profile(
            &[(
                "shell",
                "Bash",
                &[("command", "command"), ("background", "bg")],
            )],
            McpSupport::None,
        );
        assert!(adapt(&mapped, &soak).is_none());
    }

    /// `tool_calls: false`: a row whose model asks for any tool is N/A,
    /// naming the key; a row of text replies runs.
    #[test]
    fn an_agent_without_tool_calls_skips_the_tool_rows_only() {
        let mut p = profile(&[], McpSupport::None);
        p.tool_calls = false;
        let why = not_applicable(&p, &row(BG_ROW)).expect("a tool row is N/A");
        assert!(why.contains("`tool_calls: false`"), "{why}");
        assert!(why.contains("(`shell`)"), "{why}");
        let text = row(
            "  - id: t\n    responder:\n      - reply: {kind: text, text: hi}\n    expect: ended\n",
        );
        assert_eq!(not_applicable(&p, &text), None);
        p.tool_calls = true;
        assert_eq!(not_applicable(&p, &row(BG_ROW)), None);
    }

    /// `code_tool: NAME`: the agent's tools are functions inside its
    /// code-execution tool. A row whose model calls a tool by a name the
    /// profile does not map is N/A naming `code_tool`, and the note at load
    /// says so instead of pointing at `tools.mcp_probe`; a text row runs, and
    /// a tool the agent also offers by name (mapped) still runs.
    #[test]
    fn an_agent_whose_tools_live_in_code_says_so_not_the_tools_map() {
        use crate::mcp::Transport;
        const PROBE_ROW: &str = "  - id: mp\n    mcp: {transport: stdio}\n    responder:\n      - reply: {kind: tool_call, calls: [{tool: mcp_probe, args: {}}]}\n    expect: ended\n";
        let text = row(
            "  - id: t\n    responder:\n      - reply: {kind: text, text: hi}\n    expect: ended\n",
        );
        let mut p = profile(&[], McpSupport::Transports(vec![Transport::Stdio]));
        let before = warnings(&p, &[row(PROBE_ROW)]);
        assert!(
            before[0].contains("maps no `tools.mcp_probe`"),
            "{before:?}"
        );
        p.code_tool = Some("run_python".into());
        for r in [row(PROBE_ROW), row(BG_ROW)] {
            let why = not_applicable(&p, &r).expect("a by-name tool row is N/A");
            assert!(
                why.contains("code-execution tool `run_python` (`code_tool`)"),
                "{why}"
            );
        }
        assert_eq!(not_applicable(&p, &text), None);
        // A call to a tool no agent has still runs: it asks how the agent
        // answers an unknown tool.
        let unknown = row("  - id: u\n    responder:\n      - reply: {kind: tool_call, calls: [{tool: no_such_tool_chaos, args: {command: x}}]}\n    expect: ended\n");
        assert_eq!(not_applicable(&p, &unknown), None);
        let w = warnings(&p, &[row(PROBE_ROW), row(BG_ROW), text]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("`run_python` (`code_tool`): 2 selected row(s)"),
            "{w:?}"
        );
        assert!(!w[0].contains("tools.mcp_probe"), "{w:?}");
        let mut both = profile(
            &[("shell", "bash", &[("command", "cmd"), ("background", "bg")])],
            McpSupport::None,
        );
        both.code_tool = Some("run_python".into());
        assert_eq!(not_applicable(&both, &row(BG_ROW)), None);
    }

    #[test]
    fn an_unmapped_required_argument_makes_the_row_na_with_a_hint() {
        let p = profile(
            &[("shell", "exec_command", &[("command", "cmd")])],
            McpSupport::None,
        );
        let why = not_applicable(&p, &row(BG_ROW)).unwrap();
        assert!(why.contains("maps no `background` argument"), "{why}");
        assert!(why.contains("add `background: "), "{why}");
        let mapped = profile(
            &[(
                "shell",
                "Bash",
                &[("command", "command"), ("background", "run_in_background")],
            )],
            McpSupport::None,
        );
        assert_eq!(not_applicable(&mapped, &row(BG_ROW)), None);
        // The optional `timeout` is a warning, not N/A.
        let w = warnings(&mapped, &[row(BG_ROW)]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("maps no `timeout` argument"), "{w:?}");
    }

    #[test]
    fn background_gap_names_the_missing_argument_or_none() {
        let bare = profile(
            &[("shell", "exec", &[("command", "cmd")])],
            McpSupport::None,
        );
        let why = background_gap(&bare).expect("no background mapping");
        assert!(why.contains("maps no `background` argument"), "{why}");
        let mapped = profile(
            &[(
                "shell",
                "Bash",
                &[("command", "command"), ("background", "run_in_background")],
            )],
            McpSupport::default(),
        );
        assert_eq!(background_gap(&mapped), None);
    }

    #[test]
    fn an_identity_mapping_passes_every_argument() {
        let p = profile(&[("shell", "shell", &[])], McpSupport::None);
        assert_eq!(not_applicable(&p, &row(BG_ROW)), None);
        assert!(warnings(&p, &[row(BG_ROW)]).is_empty());
    }

    #[test]
    fn mcp_rows_are_na_for_every_missing_declaration() {
        let r = row(MCP_ROW);
        let undeclared = not_applicable(&profile(&[], McpSupport::Undeclared), &r).unwrap();
        assert!(
            undeclared.contains("no `mcp:` key; add `mcp: {transports: [stdio]}`"),
            "{undeclared}"
        );
        let none = not_applicable(&profile(&[], McpSupport::None), &r).unwrap();
        assert!(none.contains("mcp: false"), "{none}");
        let stdio = McpSupport::Transports(vec![crate::mcp::Transport::Stdio]);
        let pinned = not_applicable(&profile(&[], stdio), &r).unwrap();
        assert!(pinned.contains("pins MCP transport `http`"), "{pinned}");
        let both = McpSupport::Transports(vec![
            crate::mcp::Transport::Stdio,
            crate::mcp::Transport::Http,
        ]);
        assert_eq!(not_applicable(&profile(&[], both), &r), None);
    }

    #[test]
    fn a_subagent_row_needs_a_mapped_subagent_tool() {
        let why = not_applicable(&profile(&[], McpSupport::None), &row(SUB_ROW)).unwrap();
        assert!(
            why.contains("maps no `subagent` tool; add `tools: {subagent:"),
            "{why}"
        );
        let p = profile(
            &[("subagent", "Task", &[("prompt", "prompt")])],
            McpSupport::None,
        );
        assert_eq!(not_applicable(&p, &row(SUB_ROW)), None);
    }

    #[test]
    fn a_credential_row_needs_a_home_file_holding_the_key() {
        const ROW: &str = "  - id: c\n    about: x\n    credential: {expires_at_call: 1, refresh: turn_end}\n    responder: [{reply: {kind: text, text: hi}}]\n    expect: error\n";
        let mut p = profile(&[], McpSupport::None);
        p.env.insert("API_KEY".into(), "{{api_key}}".into());
        let why = not_applicable(&p, &row(ROW)).unwrap();
        assert!(
            why.contains("no `home_files` template renders `{{api_key}}`"),
            "{why}"
        );
        p.home_files.push(crate::profile::HomeFile {
            path: ".agent/credentials".into(),
            template: "{{ api_key }}".into(),
        });
        assert_eq!(not_applicable(&p, &row(ROW)), None);
    }
}
