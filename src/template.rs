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
//! on/off switch such as `{{agent_sandbox}}` into the agent's own spelling).
//! An unknown filter is an error.
//! docs/profiles.md documents each filter ([`FILTERS`]; tests/docs.rs
//! keeps the two lists equal).

use std::collections::BTreeMap;

/// Values available to a template.
pub type Vars = BTreeMap<String, String>;

/// Every filter [`render`] implements, by name (`default` takes an argument).
pub const FILTERS: [&str; 5] = ["ms", "int", "json", "default", "choose"];

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
    let mut value = match (lookup(name, vars), default) {
        (Ok(v), _) => v,
        (Err(_), Some(d)) => d,
        (Err(e), None) => return Err(e),
    };
    for f in filters {
        value = match f {
            "ms" => format!("{}", (seconds(&value, expr)? * 1000.0).round() as u64),
            "int" => format!("{}", seconds(&value, expr)?.ceil() as u64),
            "json" => serde_json::to_string(&value).unwrap_or_default(),
            f if f.starts_with("default") => value,
            f if f.starts_with("choose") => choose(&f["choose".len()..], &value, expr)?,
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
