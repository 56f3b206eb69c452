//! `never`: the request is never answered: a permission prompt the user
//! never looks at, a `fs/read_text_file` on a hung disk, a
//! `terminal/wait_for_exit` that never returns. A pending
//! `session/request_permission` is answered `cancelled` when the turn is
//! cancelled (the protocol's rule for the client); the agent must then end
//! the turn.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Never {}

impl crate::kinds::Kind for Never {
    const NAME: &'static str = "never";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        waits: true,
        ..crate::kinds::Facts::NONE
    };
}

impl super::ClientFault for Never {
    fn plan(&self) -> super::Plan {
        super::Plan::Held
    }
}
