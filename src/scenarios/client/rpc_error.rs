//! `rpc_error`: answer the request at once with a JSON-RPC error (`code`,
//! default -32603 Internal error; `message`), as an editor whose file
//! system or terminal fails does.

use serde::{Deserialize, Serialize};

fn internal() -> i64 {
    -32603
}

fn message() -> String {
    "Internal error".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RpcErrorReply {
    #[serde(default = "internal")]
    pub code: i64,
    #[serde(default = "message")]
    pub message: String,
}

impl crate::kinds::Kind for RpcErrorReply {
    const NAME: &'static str = "rpc_error";
}

impl super::ClientFault for RpcErrorReply {
    fn plan(&self) -> super::Plan {
        super::Plan::Error {
            code: self.code,
            message: self.message.clone(),
        }
    }
}
