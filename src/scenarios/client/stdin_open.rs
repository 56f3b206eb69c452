//! `stdin_open` (`terminal/create` only): the terminal is created as usual,
//! but its command's stdin is a pipe chaosrun holds open and never writes,
//! not `/dev/null`: a command that reads its input (`read`, a prompt asking
//! "continue? [y/N]") waits forever, as in an editor's terminal nobody
//! types into.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdinOpen {}

impl crate::kinds::Kind for StdinOpen {
    const NAME: &'static str = "stdin_open";
}

impl super::ClientFault for StdinOpen {
    fn plan(&self) -> super::Plan {
        super::Plan::StdinOpen
    }
}
