//! Where a server chaosrun runs binds its loopback listener: on the host's
//! 127.0.0.1, or through a [`Binder`] the sandbox hands down (a scenario's
//! network namespace, see `driver::netns`), so the agent inside the namespace
//! reaches the scenario's provider and MCP server and nothing else; and the
//! record of whether a scenario's agent was so contained ([`Network`]). A
//! lower layer than the servers and the sandbox, so both can name it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Binds a listener on 127.0.0.1 at the given port (0: any free one)
/// somewhere other than the host's network namespace.
pub type Binder = Arc<
    dyn Fn(u16) -> futures_util::future::BoxFuture<'static, std::io::Result<std::net::TcpListener>>
        + Send
        + Sync,
>;

/// A TCP listener on 127.0.0.1:`port`: through `binder` when there is one,
/// else on the host.
pub async fn loopback(
    binder: Option<&Binder>,
    port: u16,
) -> std::io::Result<tokio::net::TcpListener> {
    match binder {
        None => tokio::net::TcpListener::bind(("127.0.0.1", port)).await,
        Some(b) => {
            // Bound in another namespace, by the thread that enters it.
            let std = b(port).await?;
            std.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(std)
        }
    }
}

/// Whether a scenario's agent was network-contained, as the report says.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Network {
    /// The agent ran in a network namespace of its own (loopback only).
    pub contained: bool,
    /// Why not (`network: host` in the profile, or why no namespace could be
    /// made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The network namespace the agent ran in, as `readlink
    /// /proc/PID/ns/net` names it (`net:[INODE]`): a tool that prints its
    /// own shows whether a sandbox of the agent's gave it another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl Network {
    /// One line for the text output.
    pub fn describe(&self) -> String {
        match (&self.contained, &self.reason) {
            (true, _) => "network: each scenario's agent in its own network namespace (loopback only: the scenario's servers)".into(),
            (false, Some(r)) => format!("network: NOT contained, the agent has the host's network ({r})"),
            (false, None) => "network: NOT contained, the agent has the host's network".into(),
        }
    }
}
