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

/// A `--shard K/N` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub k: usize,
    pub n: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("`{s}` is not a shard: write K/N with 1 ≤ K ≤ N, e.g. 2/3");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (usize, usize) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if k == 0 || n == 0 || k > n {
            return Err(bad());
        }
        Ok(Shard { k, n })
    }
}

/// The scenarios of shard K of N: the i-th selected scenario (table order)
/// belongs to shard `i mod N + 1`, so shards are disjoint, cover everything,
/// and do not depend on anything but the table and the selection.
pub fn shard(selected: Vec<Scenario>, shard: Shard) -> Vec<Scenario> {
    selected
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % shard.n + 1 == shard.k)
        .map(|(_, s)| s)
        .collect()
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
    fn shards_are_disjoint_and_cover_everything() {
        let t = table();
        let mut seen: Vec<String> = Vec::new();
        for k in 1..=2 {
            let part = shard(t.clone(), Shard { k, n: 2 });
            seen.extend(part.iter().map(|s| s.id.clone()));
        }
        seen.sort();
        assert_eq!(seen, ["a", "b", "c"]);
        assert_eq!(ids(&shard(t.clone(), Shard { k: 1, n: 2 })), ["a", "c"]);
        assert_eq!(ids(&shard(t.clone(), Shard { k: 3, n: 5 })), ["c"]);
        assert!(shard(t, Shard { k: 4, n: 5 }).is_empty());
    }

    #[test]
    fn shard_syntax_is_checked() {
        assert_eq!("2/3".parse::<Shard>(), Ok(Shard { k: 2, n: 3 }));
        for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
            assert!(bad.parse::<Shard>().unwrap_err().contains("K/N"), "{bad}");
        }
    }

    #[test]
    fn unknown_id_lists_known_ones() {
        let e = select(&table(), &["zz".into()], &[]).unwrap_err();
        assert!(e.contains("`zz`") && e.contains("a, b, c"), "{e}");
    }
}
