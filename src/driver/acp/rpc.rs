//! The JSON-RPC error the ACP client side answers a request with.

/// A JSON-RPC error the client side answers with.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}
