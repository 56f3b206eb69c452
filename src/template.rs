//! `{{name}}` substitution for profile files, env values and scenario text.
//!
//! Unknown names are an error rather than an empty string, so a typo in a
//! profile is caught before any agent starts.

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
    fn unclosed_braces_are_an_error() {
        assert!(render("x {{a", &vars()).is_err());
    }
}
