//! `{{name}}` substitution for profile files, env values and scenario text.
//!
//! Unknown names are an error rather than an empty string, so a typo in a
//! profile is caught before any agent starts. `{{env:NAME}}` is the value of
//! chaosrun's own environment variable NAME (an error when it is unset), so a
//! profile can hand the agent something the caller set up, such as a DSN.
//!
//! A value may pass through filters, left to right: `{{stale_timeout | ms}}`
//! (seconds to whole milliseconds), `| int` (seconds, rounded up to a whole
//! number), `| json` (a JSON string literal, quotes included), and
//! `| default: "text"` (used when the name is unknown or the variable unset;
//! the text is a double-quoted string), and `| choose: "A", "B"` (A, unless
//! the value is `false`, `0` or empty: then B; a profile renders a row's
//! on/off switch such as `{{agent_sandbox}}` into the agent's own spelling),
//! and `| if_set: "TEXT"` (nothing at all when the value is empty or its
//! `env:NAME` unset, else TEXT with each `{}` replaced by the value: a flag
//! or config line rendered only when there is a value; an exec argument
//! that renders to nothing this way is left out of the argv, [`render_argv`]).
//! An unknown filter is an error.
//! docs/profiles.md documents each filter ([`FILTERS`]; tests/docs.rs
//! keeps the two lists equal).
//!
//! [`check`] is the load-time check of a template: every `{{...}}` renders
//! with placeholder values, and its filters fit what its variable holds
//! ([`Kind`]): a unit filter on a switch or a text (`{{agent_sandbox | ms}}`,
//! `{{model | int}}`, `{{tool_timeout | json | ms}}`) would fail on every
//! row at run time, so it is refused at load, naming the `{{...}}` as
//! written so the caller can point at its line.

use std::collections::BTreeMap;

/// Values available to a template.
pub type Vars = BTreeMap<String, String>;

/// Every filter [`render`] implements, by name (`default` takes an argument).
pub const FILTERS: [&str; 6] = ["ms", "int", "json", "default", "choose", "if_set"];

/// What a variable holds, for [`check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A number of seconds (`stale_timeout`).
    Seconds,
    /// A whole number (`max_turns`; what `ms` and `int` give).
    Count,
    /// `true` or `false` (`agent_sandbox`).
    Switch,
    /// Anything else: a URL, a path, a name, a JSON literal.
    Text,
}

impl Kind {
    fn number(self) -> bool {
        matches!(self, Kind::Seconds | Kind::Count)
    }

    fn described(self) -> &'static str {
        match self {
            Kind::Seconds => "a number of seconds",
            Kind::Count => "a whole number",
            Kind::Switch => "an on/off switch (`true` or `false`)",
            Kind::Text => "text",
        }
    }
}

/// The kinds of the variables [`check`] knows; a name not here (an
/// `env:NAME`, a capture) can hold anything and is not checked.
pub type Kinds = BTreeMap<String, Kind>;

/// A template [`check`] refuses: the `{{...}}` as written, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad {
    pub token: String,
    pub message: String,
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Check `text` at load: each `{{...}}` renders with `vars` (placeholders)
/// and its filters fit its variable's kind in `kinds`.
pub fn check(text: &str, vars: &Vars, kinds: &Kinds) -> Result<(), Bad> {
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(Bad {
                token: rest[start..].to_string(),
                message: format!("unclosed `{{{{` in {text:?}"),
            });
        };
        let token = &rest[start..start + end + 4];
        let bad = |message: String| Bad {
            token: token.to_string(),
            message,
        };
        check_kind(after[..end].trim(), kinds).map_err(bad)?;
        render(token, vars).map_err(bad)?;
        rest = &after[end + 2..];
    }
    Ok(())
}

/// Where in `source` (a file's text) a `{{...}}` with this inner text
/// (`expr`, compared trimmed) first stands: 1-based line and column.
pub fn find(source: &str, expr: &str) -> Option<(usize, usize)> {
    let expr = expr.trim();
    let mut from = 0;
    while let Some(start) = source[from..].find("{{").map(|i| from + i) {
        let after = &source[start + 2..];
        let end = after.find("}}")?;
        if after[..end].trim() == expr {
            let before = &source[..start];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            return Some((line, col));
        }
        from = start + 2;
    }
    None
}

/// The inner text of the first `{{...}}` a message quotes (the errors of
/// [`render`] and [`check`] quote the template they refuse).
pub fn quoted(message: &str) -> Option<&str> {
    let start = message.find("`{{")? + 3;
    let end = message[start..].find("}}`")?;
    Some(&message[start..start + end])
}

/// Whether each filter of one `{{...}}` fits the value it is given: the
/// unit filters take a number; `json` gives text; `choose` gives one of its
/// two texts (a number when both are).
fn check_kind(expr: &str, kinds: &Kinds) -> Result<(), String> {
    let mut parts = split_filters(expr).into_iter();
    let name = parts.next().unwrap_or_default();
    let filters: Vec<&str> = parts.collect();
    let default = filters.iter().find_map(|f| f.strip_prefix("default"));
    let literal = |t: &str| match t.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Kind::Seconds,
        _ => Kind::Text,
    };
    // The value's kind (None: not known here, it may hold anything) and
    // what made it so, for the message.
    let (mut kind, mut why) = match (kinds.get(name), default) {
        (Some(k), _) => (Some(*k), format!("`{name}` is {}", k.described())),
        // An unset `env:NAME` gives the default, which the filters get.
        (None, Some(arg)) if name.starts_with("env:") => {
            let k = parse_default(arg, expr).ok().map(|d| literal(&d));
            (k, format!("its default is {}", Kind::Text.described()))
        }
        (None, _) => (None, String::new()),
    };
    for f in filters {
        match f {
            "ms" | "int" => {
                if let Some(k) = kind.filter(|k| !k.number()) {
                    let hint = if k == Kind::Switch {
                        " (a switch is spelled with `choose: \"ON\", \"OFF\"`)"
                    } else {
                        ""
                    };
                    return Err(format!(
                        "`{{{{{expr}}}}}`: `{f}` takes a number of seconds, but {why}: every row \
                         would end in ERROR{hint}"
                    ));
                }
                kind = Some(Kind::Count);
            }
            "json" => {
                kind = Some(Kind::Text);
                why = "`json` made it a quoted JSON string".into();
            }
            f if f.starts_with("choose") => {
                let list = f["choose".len()..].trim_start().strip_prefix(':');
                let both =
                    list.and_then(|l| serde_json::from_str::<[String; 2]>(&format!("[{l}]")).ok());
                kind = Some(match both {
                    Some([a, b]) if literal(&a).number() && literal(&b).number() => Kind::Seconds,
                    _ => Kind::Text,
                });
                why = "`choose` gives one of its texts".into();
            }
            f if f.starts_with("if_set") => {
                kind = Some(Kind::Text);
                why = "`if_set` gives its text".into();
            }
            _ => {}
        }
    }
    Ok(())
}

/// Replace every `{{name | filter ...}}` (whitespace inside the braces
/// allowed) with its value.
pub fn render(text: &str, vars: &Vars) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(format!("unclosed `{{{{` in {text:?}"));
        };
        out.push_str(&expand(after[..end].trim(), vars)?);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether `text` uses the variable `name` (`{{name}}`, filtered or not).
pub fn uses(text: &str, name: &str) -> bool {
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return false;
        };
        if split_filters(after[..end].trim()).first().copied() == Some(name) {
            return true;
        }
        rest = &after[end + 2..];
    }
    false
}

/// One `{{...}}`: a name, then filters split on `|` (outside quotes).
fn expand(expr: &str, vars: &Vars) -> Result<String, String> {
    let mut parts = split_filters(expr).into_iter();
    let name = parts.next().unwrap_or_default();
    let filters: Vec<&str> = parts.collect();
    let default = filters
        .iter()
        .find_map(|f| f.strip_prefix("default"))
        .map(|arg| parse_default(arg, expr))
        .transpose()?;
    let if_set = filters.iter().any(|f| f.starts_with("if_set"));
    let mut value = match (lookup(name, vars), default) {
        (Ok(v), _) => v,
        (Err(_), Some(d)) => d,
        // An unset `env:NAME` is a value not set; an unknown name stays an
        // error (a typo is never silently nothing).
        (Err(_), None) if if_set && name.starts_with("env:") => String::new(),
        (Err(e), None) => return Err(e),
    };
    for f in filters {
        value = match f {
            "ms" => format!("{}", (seconds(&value, expr)? * 1000.0).round() as u64),
            "int" => format!("{}", seconds(&value, expr)?.ceil() as u64),
            "json" => serde_json::to_string(&value).unwrap_or_default(),
            f if f.starts_with("default") => value,
            f if f.starts_with("choose") => choose(&f["choose".len()..], &value, expr)?,
            f if f.starts_with("if_set") => {
                let text = when_set(&f["if_set".len()..], expr)?;
                if value.is_empty() {
                    return Ok(String::new());
                }
                text.replace("{}", &value)
            }
            other => {
                return Err(format!(
                    "unknown filter `{other}` in `{{{{{expr}}}}}`; known: {} (`default: \"text\"`)",
                    FILTERS.join(", ")
                ))
            }
        };
    }
    Ok(value)
}

/// `expr` split on `|` outside double quotes, each part trimmed.
fn split_filters(expr: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut from, mut quoted) = (0, false);
    for (i, c) in expr.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '|' if !quoted => {
                parts.push(expr[from..i].trim());
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(expr[from..].trim());
    parts
}

/// The argument of `default: "text"` (what follows the word `default`).
fn parse_default(arg: &str, expr: &str) -> Result<String, String> {
    let arg = arg.trim_start();
    let quoted = arg.strip_prefix(':').map(str::trim);
    match quoted.and_then(|q| serde_json::from_str::<String>(q).ok()) {
        Some(text) => Ok(text),
        None => Err(format!(
            "bad filter in `{{{{{expr}}}}}`: write `default: \"text\"` with a double-quoted text"
        )),
    }
}

/// The TEXT of `if_set: "TEXT"`.
fn when_set(arg: &str, expr: &str) -> Result<String, String> {
    let quoted = arg.trim_start().strip_prefix(':').map(str::trim);
    quoted
        .and_then(|q| serde_json::from_str::<String>(q).ok())
        .ok_or_else(|| {
            format!(
                "bad filter in `{{{{{expr}}}}}`: write `if_set: \"--flag={{}}\"` with a double-quoted \
                 text (`{{}}` stands for the value)"
            )
        })
}

/// An argv rendered ([`render`]): an argument that uses `if_set` and
/// renders to nothing (its value was not set) is left out, never passed as
/// an empty string.
pub fn render_argv(argv: &[String], vars: &Vars) -> Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(argv.len());
    for a in argv {
        let r = render(a, vars)?;
        if r.is_empty() && a.contains("if_set") {
            continue;
        }
        out.push(r);
    }
    Ok(out)
}

/// `choose: "A", "B"`: A for a value that is on, B for `false`, `0` or empty.
fn choose(arg: &str, value: &str, expr: &str) -> Result<String, String> {
    let list = arg.trim_start().strip_prefix(':').map(|a| format!("[{a}]"));
    match list.and_then(|l| serde_json::from_str::<[String; 2]>(&l).ok()) {
        Some([on, off]) => Ok(match value.trim() {
            "false" | "0" | "" => off,
            _ => on,
        }),
        None => Err(format!(
            "bad filter in `{{{{{expr}}}}}`: write `choose: \"when on\", \"when off\"` with two double-quoted texts"
        )),
    }
}

/// A value read as seconds, for the unit filters.
fn seconds(value: &str, expr: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "`{{{{{expr}}}}}`: {value:?} is not a number of seconds"
        )),
    }
}

/// A name's value: a variable, or `env:NAME` from chaosrun's environment.
fn lookup(name: &str, vars: &Vars) -> Result<String, String> {
    if let Some(var) = name.strip_prefix("env:") {
        let var = var.trim();
        return std::env::var(var).map_err(|_| {
            format!("`{{{{{name}}}}}` needs the environment variable {var} to be set")
        });
    }
    vars.get(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = vars.keys().map(String::as_str).collect();
        format!(
            "unknown template variable `{{{{{name}}}}}`; known: {}",
            known.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_picks_by_the_value_and_refuses_a_bad_argument() {
        let mut v = vars();
        v.insert("agent_sandbox".into(), "true".into());
        let t = r#"{{agent_sandbox | choose: "--sandbox=on", "--no-sandbox"}}"#;
        assert_eq!(render(t, &v).unwrap(), "--sandbox=on");
        v.insert("agent_sandbox".into(), "false".into());
        assert_eq!(render(t, &v).unwrap(), "--no-sandbox");
        let e = render(r#"{{agent_sandbox | choose: "one"}}"#, &v).unwrap_err();
        assert!(e.contains("two double-quoted texts"), "{e}");
    }

    #[test]
    fn if_set_renders_only_a_value_that_is_there() {
        let mut v = vars();
        v.insert("mcp_url".into(), "http://127.0.0.1:9/mcp".into());
        v.insert("mcp_command".into(), String::new());
        let url = r#"{{mcp_url | if_set: "--mcp-url={}"}}"#;
        assert_eq!(render(url, &v).unwrap(), "--mcp-url=http://127.0.0.1:9/mcp");
        let cmd = r#"{{mcp_command | if_set: "--mcp-command={}"}}"#;
        assert_eq!(render(cmd, &v).unwrap(), "");
        // A config line, its value JSON-quoted first.
        let line = r#"a = 1{{mcp_url | json | if_set: "\nurl = {}"}}"#;
        assert_eq!(
            render(line, &v).unwrap(),
            "a = 1\nurl = \"http://127.0.0.1:9/mcp\""
        );
        // An unset env:NAME is not set; an unknown name is still a typo.
        let env = r#"{{env:CHAOSRUN_TEST_SURELY_UNSET_47 | if_set: "--proxy={}"}}"#;
        assert_eq!(render(env, &v).unwrap(), "");
        let typo = render(r#"{{mcp_ulr | if_set: "x={}"}}"#, &v).unwrap_err();
        assert!(typo.contains("unknown template variable"), "{typo}");
        let bad = render(r#"{{mcp_url | if_set: --x}}"#, &v).unwrap_err();
        assert!(bad.contains("double-quoted"), "{bad}");
        // The value is checked as text after it: no unit filter on a flag.
        let kinds: Kinds = [("request_timeout".to_string(), Kind::Seconds)].into();
        v.insert("request_timeout".into(), "5".into());
        assert!(check(r#"{{request_timeout | ms | if_set: "--t={}"}}"#, &v, &kinds).is_ok());
        assert!(check(r#"{{request_timeout | if_set: "{}" | ms}}"#, &v, &kinds).is_err());
        // In an argv the argument that rendered to nothing is left out.
        let argv: Vec<String> = ["cli", url, cmd, "{{mcp_command}}", "msg"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            render_argv(&argv, &v).unwrap(),
            ["cli", "--mcp-url=http://127.0.0.1:9/mcp", "", "msg"]
        );
    }

    #[test]
    fn uses_finds_a_variable_filtered_or_not() {
        assert!(uses("{\"k\": {{ api_key | json }}}", "api_key"));
        assert!(uses("key={{api_key}}", "api_key"));
        assert!(!uses("key={{api_key_file}} {{model}}", "api_key"));
    }

    fn vars() -> Vars {
        [("a", "1"), ("base_url", "http://x/v1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn kinds() -> Kinds {
        [
            ("a", Kind::Seconds),
            ("base_url", Kind::Text),
            ("agent_sandbox", Kind::Switch),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// A unit filter on a switch or a text, also after `json` or `choose`,
    /// or on an unset variable's text default, is refused at load, naming
    /// the `{{...}}` as written; numbers, captures and `env:` values pass.
    #[test]
    fn a_filter_that_does_not_fit_its_value_is_refused_at_load() {
        let mut v = vars();
        // Placeholder values, as the load renders with.
        v.insert("agent_sandbox".into(), "1".into());
        v.insert("base_url".into(), "1".into());
        let refused = [
            (
                "{{agent_sandbox | ms}}",
                "`agent_sandbox` is an on/off switch",
            ),
            ("x {{ base_url|int }} y", "`base_url` is text"),
            ("{{a | json | ms}}", "`json` made it a quoted JSON string"),
            (
                "{{agent_sandbox | choose: \"on\", \"off\" | int}}",
                "`choose` gives",
            ),
            (
                "{{env:CHAOSRUN_SURELY_UNSET_VAR | default: \"no\" | ms}}",
                "its default is text",
            ),
        ];
        for (t, why) in refused {
            let e = check(t, &v, &kinds()).unwrap_err();
            assert!(e.message.contains(why), "{t}: {e}");
            assert!(e.message.contains("every row would end in ERROR"), "{e}");
            assert!(
                t.contains(&e.token) && e.token.starts_with("{{"),
                "{t}: {e:?}"
            );
        }
        // The placeholder values render: only the kinds tell.
        assert!(render("{{agent_sandbox | ms}} {{base_url | int}}", &v).is_ok());
        assert!(check("{{agent_sandbox | ms}}", &v, &kinds())
            .unwrap_err()
            .message
            .contains("choose"));
        for t in [
            "{{a | ms}} {{a | int | ms}}",
            "{{agent_sandbox | choose: \"5\", \"0\" | ms}}",
            "{{agent_sandbox}} {{agent_sandbox | json}} {{base_url | json}}",
            "{{env:CHAOSRUN_SURELY_UNSET_VAR | ms | default: \"1\"}}",
        ] {
            assert_eq!(check(t, &v, &kinds()), Ok(()), "{t}");
        }
        // Not a kind error: still refused as render refuses it.
        let e = check("ok {{nope}}", &v, &kinds()).unwrap_err();
        assert_eq!(e.token, "{{nope}}");
    }

    #[test]
    fn a_template_is_found_by_its_inner_text() {
        let src = "a: 1\nenv:\n  X: \"pre {{ agent_sandbox | ms }}\"\n";
        assert_eq!(find(src, "agent_sandbox | ms"), Some((3, 11)));
        assert_eq!(find(src, "agent_sandbox"), None);
        assert_eq!(quoted("`{{a | ms}}`: no"), Some("a | ms"));
        assert_eq!(quoted("no template"), None);
    }

    #[test]
    fn substitutes_known_names() {
        assert_eq!(
            render("u={{base_url}} a={{ a }}", &vars()).unwrap(),
            "u=http://x/v1 a=1"
        );
    }

    #[test]
    fn unknown_name_is_an_error_listing_known_ones() {
        let e = render("{{nope}}", &vars()).unwrap_err();
        assert!(e.contains("`{{nope}}`") && e.contains("base_url"), "{e}");
    }

    #[test]
    fn env_form_reads_the_environment_or_says_what_is_missing() {
        assert_eq!(
            render("p={{env:PATH}}", &vars()).unwrap(),
            format!("p={}", std::env::var("PATH").unwrap())
        );
        let e = render("{{env:CHAOSRUN_SURELY_UNSET_VAR}}", &vars()).unwrap_err();
        assert!(e.contains("CHAOSRUN_SURELY_UNSET_VAR to be set"), "{e}");
    }

    #[test]
    fn unclosed_braces_are_an_error() {
        assert!(render("x {{a", &vars()).is_err());
    }

    #[test]
    fn unit_filters_turn_seconds_into_what_a_cli_wants() {
        let mut v = vars();
        v.insert("stale_timeout".into(), "2.5".into());
        assert_eq!(render("{{stale_timeout | ms}}", &v).unwrap(), "2500");
        assert_eq!(render("{{ stale_timeout|int }}", &v).unwrap(), "3");
        let e = render("{{base_url | ms}}", &v).unwrap_err();
        assert!(e.contains("not a number of seconds"), "{e}");
    }

    #[test]
    fn default_covers_an_unset_variable_and_nothing_else() {
        assert_eq!(
            render(
                "[{{env:CHAOSRUN_SURELY_UNSET_VAR | default: \"\"}}]",
                &vars()
            )
            .unwrap(),
            "[]"
        );
        assert_eq!(
            render("{{nope | default: \"a|b\"}}", &vars()).unwrap(),
            "a|b"
        );
        assert_eq!(render("{{a | default: \"9\"}}", &vars()).unwrap(), "1");
        assert!(render("{{a | default: 9}}", &vars()).is_err());
    }

    #[test]
    fn json_filter_quotes_and_escapes() {
        let mut v = vars();
        v.insert("msg".into(), "say \"hi\"\n".into());
        assert_eq!(render("{{msg | json}}", &v).unwrap(), r#""say \"hi\"\n""#);
    }

    #[test]
    fn every_listed_filter_is_implemented() {
        for f in FILTERS {
            let expr = match f {
                "default" => "{{a | default: \"x\"}}".to_string(),
                "choose" => "{{a | choose: \"x\", \"y\"}}".to_string(),
                "if_set" => "{{a | if_set: \"-a={}\"}}".to_string(),
                f => format!("{{{{a | {f}}}}}"),
            };
            assert!(render(&expr, &vars()).is_ok(), "{expr}");
        }
    }

    #[test]
    fn unknown_filter_is_an_error_naming_the_known_ones() {
        let e = render("{{a | shout}}", &vars()).unwrap_err();
        assert!(
            e.contains("unknown filter `shout`") && e.contains("ms, int"),
            "{e}"
        );
    }
}
