//! The faults explore draws from: every model-provider reply kind that
//! declares a way to serve it (`kinds::Explored`, in the kind's own file:
//! retryable faults, and value faults an agent may end its turn on),
//! in their declared draw order, read from the reply registry; and what the
//! generator, calibration, coverage and the schedule read of each, asked of
//! the kind through its family (its error hint, whether it waits), never by
//! its name. A new kind reaches explore by declaring an `Explored`.

use std::sync::OnceLock;

use crate::kinds::Explored;
use crate::provider::replies::Reply;

/// One fault of the menu: what its kind declared, and the reply it makes.
#[derive(Debug)]
pub struct Item {
    pub explored: Explored,
    /// `{kind: NAME, ...fields}`, as a table row writes it.
    pub yaml: serde_yaml::Value,
    pub reply: Reply,
}

/// Every declared fault, in draw order (rank 0 first).
pub fn menu() -> &'static [Item] {
    static MENU: OnceLock<Vec<Item>> = OnceLock::new();
    MENU.get_or_init(|| {
        let mut items: Vec<Item> = Reply::FACTS
            .iter()
            .flat_map(|(name, facts)| facts.explore.iter().map(move |e| item(name, *e)))
            .collect();
        items.sort_by_key(|i| i.explored.rank);
        items
    })
}

/// The item of kind `name` served as `e` (a declaration that does not
/// parse as its kind is a bug in the kind's file, caught by the unit test).
fn item(name: &str, e: Explored) -> Item {
    let fields: serde_yaml::Mapping = serde_yaml::from_str(e.fields)
        .unwrap_or_else(|err| panic!("{name}: explore fields {:?}: {err}", e.fields));
    let mut yaml = serde_yaml::Mapping::new();
    yaml.insert("kind".into(), name.into());
    yaml.extend(fields);
    let yaml = serde_yaml::Value::Mapping(yaml);
    let reply = serde_yaml::from_value(yaml.clone())
        .unwrap_or_else(|err| panic!("{name}: explore fields {:?}: {err}", e.fields));
    Item {
        explored: e,
        yaml,
        reply,
    }
}

/// The weights' names, in draw order.
pub fn keys() -> Vec<&'static str> {
    menu().iter().map(|i| i.explored.key).collect()
}

/// The position of the weight named `key`.
pub fn position(key: &str) -> Option<usize> {
    menu().iter().position(|i| i.explored.key == key)
}

impl Item {
    /// The agent backs off after it (an error with a retry hint), so an
    /// interrupt can land in the wait.
    pub fn is_error(&self) -> bool {
        self.reply.error_hint().is_some()
    }

    /// A value fault (a 200 that is wrong without being an error: empty,
    /// cut for length): not retried as an error; the agent may end its
    /// turn on it.
    pub fn ends_turn(&self) -> bool {
        self.reply.value_fault()
    }

    /// It leaves the call waiting (until the agent's timeout gives up).
    pub fn waits(&self) -> bool {
        Reply::waits(self.reply.kind_name())
    }

    /// It breaks an answer whose stream began.
    pub fn mid_stream(&self) -> bool {
        self.explored.mid_stream
    }

    /// The retry-after its error tells the agent, in seconds (0: none).
    pub fn retry_after(&self) -> u64 {
        self.reply
            .error_hint()
            .and_then(|h| h.retry_after)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The menu builds from the registry: ranks 0..n once each, keys
    /// unique, every fault a retryable fault of its kind or a value fault.
    #[test]
    fn the_menu_is_the_registry_s_declared_faults() {
        let m = menu();
        assert!(m.len() >= 5, "{m:?}");
        for (i, item) in m.iter().enumerate() {
            assert_eq!(usize::from(item.explored.rank), i, "{:?}", item.explored);
            assert!(item.reply.is_fault(), "{item:?}");
            assert!(item.reply.retryable() != item.ends_turn(), "{item:?}");
        }
        let mut keys = keys();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), m.len());
        assert!(!keys.contains(&"ok"), "`ok` is explore's own weight");
        // As explore's hand-written list had them, in its order.
        let short: Vec<&str> = m.iter().map(|i| i.explored.short).collect();
        assert_eq!(
            short,
            ["500", "429", "drop", "stall", "hang", "empty", "nocalls", "cut", "refused"]
        );
    }
}
