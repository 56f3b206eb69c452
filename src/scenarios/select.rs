//! Selecting scenarios with `--only` and `--skip`; an unknown id is an error that
//! lists the known ones.

use super::schema::Scenario;

/// Keep `only` (all when empty) minus `skip`, in table order.
pub fn select(all: &[Scenario], only: &[String], skip: &[String]) -> Result<Vec<Scenario>, String> {
    for id in only.iter().chain(skip) {
        if !all.iter().any(|s| &s.id == id) {
            let known: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
            return Err(format!(
                "unknown scenario id `{id}`; known ids: {}",
                known.join(", ")
            ));
        }
    }
    Ok(all
        .iter()
        .filter(|s| only.is_empty() || only.contains(&s.id))
        .filter(|s| !skip.contains(&s.id))
        .cloned()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Vec<Scenario> {
        let yaml = "scenarios:\n\
            - {id: a, responder: [{reply: {kind: hang}}], expect: error}\n\
            - {id: b, responder: [{reply: {kind: hang}}], expect: error}\n\
            - {id: c, responder: [{reply: {kind: hang}}], expect: error}\n";
        crate::scenarios::load_str(yaml, "t").unwrap().scenarios
    }

    fn ids(v: &[Scenario]) -> Vec<&str> {
        v.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn only_and_skip_combine_in_table_order() {
        let t = table();
        assert_eq!(ids(&select(&t, &[], &[]).unwrap()), ["a", "b", "c"]);
        let only = vec!["c".to_string(), "a".to_string()];
        assert_eq!(ids(&select(&t, &only, &[]).unwrap()), ["a", "c"]);
        assert_eq!(ids(&select(&t, &only, &["a".into()]).unwrap()), ["c"]);
    }

    #[test]
    fn unknown_id_lists_known_ones() {
        let e = select(&table(), &["zz".into()], &[]).unwrap_err();
        assert!(e.contains("`zz`") && e.contains("a, b, c"), "{e}");
    }
}
