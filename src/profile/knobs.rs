//! `agent_knobs:`, the scenario knobs the agent itself has a setting for
//! (its request timeout, its shell tool's default timeout, ...), and which of
//! them the profile renders nowhere. A knob the agent has but the profile
//! leaves out makes every row that sets it judge the agent's default instead
//! of the row's value: the verdict is the profile's, not the agent's. Each
//! such knob is one run-wide warning (in the report's `warnings`, and so in
//! `chaosrun agents check`'s output). Pure: the profile as written in, names
//! and warnings out.

use serde::Serialize;

/// The knobs a profile can render (`{{request_timeout | ms}}`), as a table
/// row's `knobs:` names them; `model` is no knob of the agent's own.
pub const NAMES: [&str; 5] = [
    "stale_timeout",
    "request_timeout",
    "api_max_retries",
    "max_turns",
    "tool_timeout",
];

/// `agent_knobs` must name knobs: an unknown name is a load error that lists
/// the five.
pub fn validate(declared: &[String]) -> Result<(), String> {
    match declared.iter().find(|k| !NAMES.contains(&k.as_str())) {
        Some(bad) => Err(format!(
            "agent_knobs: `{bad}` is not a knob; the knobs are {}",
            NAMES.join(", ")
        )),
        None => Ok(()),
    }
}

/// The declared knobs that no template of `doc` (the whole profile as
/// written: `command`, `exec`, `env`, `home_files`, ...) renders, in the
/// order they are declared.
pub fn unmapped<T: Serialize>(declared: &[String], doc: &T) -> Vec<String> {
    let value = serde_json::to_value(doc).unwrap_or_default();
    let mut texts = Vec::new();
    strings(&value, &mut texts);
    declared
        .iter()
        .filter(|k| !texts.iter().any(|t| crate::template::uses(t, k)))
        .cloned()
        .collect()
}

/// Every string value in `v`, at any depth (a template may stand in any
/// value of the profile: an `env:` value, an `exec` argument, a home file).
fn strings<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match v {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
        serde_json::Value::Object(map) => map.values().for_each(|i| strings(i, out)),
        _ => {}
    }
}

/// The warning for one knob the agent has and the profile does not render.
pub fn warning(knob: &str) -> String {
    format!(
        "the profile declares that the agent has a setting for `{knob}` (`agent_knobs`) but \
         renders `{{{{{knob}}}}}` nowhere: every row judges the agent's own default instead of \
         the row's {knob}, so a verdict on it is the profile's; write it where the agent reads \
         it, in the agent's unit (`{{{{{knob} | ms}}}}` for milliseconds)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_declared_knob_no_template_renders_is_unmapped() {
        let doc = serde_json::json!({
            "env": {"TIMEOUT_MS": "{{ tool_timeout | ms }}"},
            "exec": {"first": ["cli", "--stale", "{{stale_timeout}}"]},
            "note": "request_timeout",
        });
        let declared = names(&["request_timeout", "tool_timeout", "stale_timeout"]);
        assert_eq!(unmapped(&declared, &doc), names(&["request_timeout"]));
        assert!(unmapped(&names(&[]), &doc).is_empty());
    }

    #[test]
    fn an_unknown_knob_is_refused_naming_the_knobs() {
        assert!(validate(&names(&["tool_timeout", "max_turns"])).is_ok());
        let e = validate(&names(&["request_timout"])).unwrap_err();
        assert!(e.contains("`request_timout` is not a knob"), "{e}");
        assert!(e.contains("stale_timeout, request_timeout"), "{e}");
    }

    #[test]
    fn the_warning_names_the_knob_and_the_fix() {
        let w = warning("request_timeout");
        assert!(w.contains("`request_timeout` (`agent_knobs`)"), "{w}");
        assert!(w.contains("renders `{{request_timeout}}` nowhere"), "{w}");
        assert!(w.contains("`{{request_timeout | ms}}`"), "{w}");
    }
}
