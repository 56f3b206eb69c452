//! The ACP drive: chaosrun as the Agent Client Protocol client ([`rpc`]'s error, [`terminal`]'s commands).

pub mod rpc;
pub mod terminal;
