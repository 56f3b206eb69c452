//! `{{name}}` substitution for profile files, env values and scenario text.
//!
//! Unknown names are an error rather than an empty string, so a typo in a
//! profile is caught before any agent starts. `{{env:NAME}}` is the value of
//! chaosrun's own environment variable NAME (an error when it is unset), so a
//! profile can hand the agent something the caller set up, such as a DSN.

use std::collections::BTreeMap;

/// Values available to a template.
pub type Vars = BTreeMap<String, String>;

/// Replace every `{{name}}` (whitespace inside the braces allowed) with its value.
pub fn render(text: &str, vars: &Vars) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(format!("unclosed `{{{{` in {text:?}"));
        };
        let name = after[..end].trim();
        if let Some(var) = name.strip_prefix("env:") {
            match std::env::var(var.trim()) {
                Ok(v) => out.push_str(&v),
                Err(_) => {
                    return Err(format!(
                        "`{{{{{name}}}}}` needs the environment variable {} to be set",
                        var.trim()
                    ))
                }
            }
            rest = &after[end + 2..];
            continue;
        }
        match vars.get(name) {
            Some(v) => out.push_str(v),
            None => {
                let known: Vec<&str> = vars.keys().map(String::as_str).collect();
                return Err(format!(
                    "unknown template variable `{{{{{name}}}}}`; known: {}",
                    known.join(", ")
                ));
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
