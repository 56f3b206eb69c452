//! What a shipped profile declares, read from its YAML for `chaosrun agents`:
//! wire, resume, MCP transports, subagent tool, background argument.

use serde_yaml::Value;

/// The capabilities a profile declares (the profile is the one source).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// `wire:` (default `openai-chat`).
    pub wire: String,
    /// `exec` (one process per turn) or `driver` (the CHAOS protocol).
    pub mode: &'static str,
    /// `resume:` (default true): kill rows run, else N/A.
    pub resume: bool,
    /// `mcp.transports`; empty for `mcp: false`; None when the key is absent.
    pub mcp: Option<Vec<String>>,
    /// The agent's name for the logical `subagent` tool, if mapped.
    pub subagent: Option<String>,
    /// The shell tool's argument for background jobs, if mapped.
    pub background: Option<String>,
}

/// Read the capabilities out of a profile's text.
pub fn read(yaml: &str) -> Result<Capabilities, String> {
    let doc: Value = serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
    let wire = doc
        .get("wire")
        .and_then(Value::as_str)
        .unwrap_or("openai-chat")
        .to_string();
    let mode = if doc.get("exec").is_some() {
        "exec"
    } else {
        "driver"
    };
    let resume = doc.get("resume").and_then(Value::as_bool).unwrap_or(true);
    let mcp = doc.get("mcp").map(|m| {
        m.get("transports")
            .and_then(Value::as_sequence)
            .map(|ts| {
                ts.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    });
    let tools = doc.get("tools");
    let subagent = tools
        .and_then(|t| t.get("subagent"))
        .and_then(|s| s.get("name"))
        .and_then(Value::as_str)
        .map(String::from);
    let shell = tools.and_then(|t| t.get("shell"));
    let background = match shell.map(|s| s.get("args")) {
        Some(Some(args)) => args.get("background").and_then(|b| match b {
            Value::String(s) => Some(s.clone()),
            other => other.get("name").and_then(Value::as_str).map(String::from),
        }),
        // A shell tool mapped without an `args` map passes every argument.
        Some(None) => Some("background".into()),
        None => None,
    };
    Ok(Capabilities {
        wire,
        mode,
        resume,
        mcp,
        subagent,
        background,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_declared_capabilities() {
        let c = read(
            "wire: anthropic\nexec: {first: [x]}\nresume: false\nmcp: {transports: [stdio]}\n\
             tools:\n  shell: {name: Bash, args: {command: command, background: run_in_background}}\n  \
             subagent: {name: Task, args: {prompt: prompt}}\n",
        )
        .unwrap();
        assert_eq!(c.wire, "anthropic");
        assert_eq!(c.mode, "exec");
        assert!(!c.resume);
        assert_eq!(c.mcp, Some(vec!["stdio".to_string()]));
        assert_eq!(c.subagent.as_deref(), Some("Task"));
        assert_eq!(c.background.as_deref(), Some("run_in_background"));
    }

    #[test]
    fn defaults_and_absent_keys() {
        let c = read("command: [x]\nmcp: false\ntools:\n  shell: {name: sh, args: {command: c}}\n")
            .unwrap();
        assert_eq!(
            (c.wire.as_str(), c.mode, c.resume),
            ("openai-chat", "driver", true)
        );
        assert_eq!(c.mcp, Some(vec![]));
        assert_eq!((c.subagent, c.background), (None, None));
        assert_eq!(read("command: [x]\n").unwrap().mcp, None);
    }
}
