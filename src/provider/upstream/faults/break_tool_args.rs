//! `break_tool_args`: the real answer's tool calls kept, their arguments
//! still JSON but breaking the tool's schema, as a model that forgot the
//! schema sends them: `how: empty` (`{}`), `wrong_key` (each top-level key
//! renamed `wrong_KEY`), `wrong_type` (each string a number, each other
//! value its JSON text as a string) or `garbled` (every third character of
//! each string a symbol). Arguments that are no JSON object become
//! `{"wrong_param": TEXT}` (`garbled`: the text garbled). A value fault:
//! see the family's doc.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::provider::cassette::Recorded;

/// How the arguments break the schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    Empty,
    #[default]
    WrongKey,
    WrongType,
    Garbled,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakToolArgs {
    #[serde(default)]
    pub how: How,
}

impl crate::kinds::Kind for BreakToolArgs {
    const NAME: &'static str = "break_tool_args";
}

/// `s` with every third character replaced by a symbol.
fn garble(s: &str) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| if i % 3 == 2 { '☌' } else { c })
        .collect()
}

/// One value of the wrong type.
fn retyped(v: Value) -> Value {
    match v {
        Value::String(s) => Value::from(s.chars().count()),
        other => Value::String(other.to_string()),
    }
}

/// `arguments` (a JSON text) broken as `how` says.
fn broken(arguments: &str, how: How) -> String {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(arguments) else {
        let text = match how {
            How::Garbled => garble(arguments),
            _ => arguments.to_string(),
        };
        return match how {
            How::Empty => "{}".into(),
            _ => serde_json::json!({ "wrong_param": text }).to_string(),
        };
    };
    let out: Map<String, Value> = match how {
        How::Empty => Map::new(),
        How::WrongKey => obj.into_iter().map(|(k, v)| (format!("wrong_{k}"), v)).collect(),
        How::WrongType => obj.into_iter().map(|(k, v)| (k, retyped(v))).collect(),
        How::Garbled => obj
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k, Value::String(garble(&s))),
                other => (k, other),
            })
            .collect(),
    };
    Value::Object(out).to_string()
}

impl super::RelayFault for BreakToolArgs {
    fn mutates(&self) -> bool {
        true
    }

    fn mutate(&self, events: &mut Vec<Recorded>) {
        for ev in events.iter_mut() {
            if let Recorded::ToolCall { arguments, .. } = ev {
                *arguments = broken(arguments, self.how);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::upstream::faults::RelayFault;

    const ARGS: &str = r#"{"command":"echo hello","timeout":5}"#;

    fn call(args: &str) -> Vec<Recorded> {
        vec![
            Recorded::Text { at: 0.0, text: "running it".into() },
            Recorded::ToolCall { at: 0.1, id: "c1".into(), name: "shell".into(), arguments: args.into() },
        ]
    }

    fn args_after(how: How, args: &str) -> Value {
        let mut ev = call(args);
        BreakToolArgs { how }.mutate(&mut ev);
        assert!(matches!(&ev[0], Recorded::Text { text, .. } if text == "running it"));
        let Recorded::ToolCall { arguments, id, .. } = &ev[1] else { panic!("{ev:?}") };
        assert_eq!(id, "c1");
        serde_json::from_str(arguments).expect("still JSON")
    }

    #[test]
    fn each_way_keeps_json_and_breaks_the_schema() {
        assert_eq!(args_after(How::Empty, ARGS), serde_json::json!({}));
        assert_eq!(
            args_after(How::WrongKey, ARGS),
            serde_json::json!({"wrong_command": "echo hello", "wrong_timeout": 5})
        );
        assert_eq!(
            args_after(How::WrongType, ARGS),
            serde_json::json!({"command": 10, "timeout": "5"})
        );
        assert_eq!(
            args_after(How::Garbled, ARGS),
            serde_json::json!({"command": "ec☌o ☌el☌o", "timeout": 5})
        );
    }

    #[test]
    fn arguments_that_are_no_object_go_under_a_wrong_key() {
        assert_eq!(
            args_after(How::WrongKey, "[1]"),
            serde_json::json!({"wrong_param": "[1]"})
        );
        assert_eq!(args_after(How::Empty, "not json"), serde_json::json!({}));
        assert_eq!(
            args_after(How::Garbled, "abcdef"),
            serde_json::json!({"wrong_param": "ab☌de☌"})
        );
    }

    #[test]
    fn the_default_is_a_wrong_key_and_unknown_ways_are_refused() {
        let f: BreakToolArgs = serde_json::from_str("{}").unwrap();
        assert_eq!(f.how, How::WrongKey);
        assert!(serde_json::from_str::<BreakToolArgs>(r#"{"how": "nonsense"}"#).is_err());
    }
}
