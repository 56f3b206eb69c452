//! The healthy server: what an unmatched request gets. One tool, `probe`
//! (`inputSchema {text: string}`), whose result is the text `probe:<text>`;
//! `initialize` answers with the client's protocol version when it is one
//! this server knows (2025-06-18, 2025-03-26, 2024-11-05), else the newest.

use serde_json::{json, Value};

use super::replies::{Ctx, Frame};

/// The one tool the server lists.
pub const PROBE_TOOL: &str = "probe";

/// The probe tool's argument, echoed back as `probe:<text>` (until a
/// `schema_swap` renames it).
pub const PROBE_ARG: &str = "text";

/// Protocol versions answered as asked; any other gets the first.
pub const VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];
/// The methods a rule may name.
pub const METHODS: &[&str] = &["initialize", "tools/list", "tools/call"];

/// The `tools/list` result (after a `schema_swap`, `probe` takes `query`).
pub fn tools(swapped: bool) -> Value {
    let arg = if swapped {
        super::replies::schema_swap::NEW_ARG
    } else {
        PROBE_ARG
    };
    json!({"tools": [{
        "name": PROBE_TOOL,
        "description": format!("chaosrun's probe tool: echoes its {arg} argument as `probe:<{arg}>`."),
        "inputSchema": {
            "type": "object",
            "properties": {arg: {"type": "string", "description": "any text"}},
            "required": [arg],
        },
    }]})
}

fn error(ctx: &Ctx, code: i64, message: &str) -> Frame {
    Frame::json(
        &json!({"jsonrpc": "2.0", "id": ctx.id, "error": {"code": code, "message": message}}),
    )
}

/// The healthy answer to a request.
pub fn healthy(ctx: &Ctx) -> Frame {
    match ctx.method.as_str() {
        "initialize" => {
            let asked = ctx.params.get("protocolVersion").and_then(Value::as_str);
            let version = asked
                .filter(|v| VERSIONS.contains(v))
                .unwrap_or(VERSIONS[0]);
            ctx.answer(json!({
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "chaosrun-mcp", "version": env!("CARGO_PKG_VERSION")},
            }))
        }
        "tools/list" => ctx.answer(tools(ctx.is_swapped())),
        "tools/call" => {
            let name = ctx.params.get("name").and_then(Value::as_str).unwrap_or("");
            if name != PROBE_TOOL {
                return error(
                    ctx,
                    -32602,
                    &format!("unknown tool `{name}`; this server lists only `{PROBE_TOOL}`"),
                );
            }
            let new = super::replies::schema_swap::NEW_ARG;
            if ctx.is_swapped() && ctx.params.pointer(&format!("/arguments/{new}")).is_none() {
                return ctx.answer(json!({
                    "content": [{"type": "text", "text": format!(
                        "probe's schema changed (tools/list_changed): it now takes `{new}`, not `text`; list the tools again")}],
                    "isError": true,
                }));
            }
            ctx.answer(json!({
                "content": [{"type": "text", "text": format!("probe:{}", ctx.text())}],
                "isError": false,
            }))
        }
        "ping" => ctx.answer(json!({})),
        m => error(ctx, -32601, &format!("method not found: {m}")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::replies::test_support::ctx;
    use super::*;

    fn value(f: Frame) -> Value {
        match f {
            Frame::Bytes(b) => serde_json::from_slice(&b).unwrap(),
            _ => panic!(),
        }
    }

    #[test]
    fn initialize_echoes_a_known_version_and_lists_probe() {
        let v = value(healthy(&ctx(
            "initialize",
            json!({"protocolVersion": "2025-03-26"}),
        )));
        assert_eq!(v["result"]["protocolVersion"], "2025-03-26");
        assert_eq!(v["result"]["capabilities"]["tools"]["listChanged"], true);
        let v = value(healthy(&ctx(
            "initialize",
            json!({"protocolVersion": "1999"}),
        )));
        assert_eq!(v["result"]["protocolVersion"], VERSIONS[0]);
        let v = value(healthy(&ctx("tools/list", Value::Null)));
        assert_eq!(
            v["result"]["tools"][0]["inputSchema"]["required"][0],
            "text"
        );
        let v = value(healthy(&ctx("tools/call", json!({"name": "nope"}))));
        assert_eq!(v["error"]["code"], -32602);
        let v = value(healthy(&ctx("resources/list", Value::Null)));
        assert_eq!(v["error"]["code"], -32601);
    }
}
