//! `huge`: a healthy-shaped `tools/call` result whose text is `bytes` bytes
//! long (default 30 MB), produced chunk by chunk as it is written, never held
//! whole. At most 1 GiB.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Ctx, Frame};

/// The largest `bytes` a table may ask for.
pub const MAX_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Huge {
    #[serde(default = "default_bytes")]
    pub bytes: u64,
}

fn default_bytes() -> u64 {
    30_000_000
}

impl Huge {
    fn check_bounds(&self) -> Result<(), String> {
        if self.bytes == 0 || self.bytes > MAX_BYTES {
            return Err(format!("`huge.bytes` is 1 to {MAX_BYTES} (1 GiB)"));
        }
        Ok(())
    }

    pub(crate) fn frame(&self, ctx: &Ctx) -> Frame {
        let marker = "@@FILL@@";
        let whole = serde_json::to_string(&json!({
            "jsonrpc": "2.0",
            "id": ctx.id,
            "result": {"content": [{"type": "text", "text": format!("probe:{}:{marker}", ctx.text())}], "isError": false},
        }))
        .unwrap_or_default();
        let (head, tail) = whole.split_once(marker).unwrap_or((&whole, ""));
        Frame::Huge {
            head: head.as_bytes().to_vec(),
            fill: self.bytes as usize,
            tail: tail.as_bytes().to_vec(),
        }
    }
}

impl crate::kinds::Kind for Huge {
    const NAME: &'static str = "huge";
}

impl super::McpReply for Huge {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(async move { super::send(tx, super::Out::Frame(self.frame(ctx))).await })
    }

    fn check(&self, _method: &str) -> Result<(), String> {
        self.check_bounds()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect};
    use super::super::{Out, Reply};

    #[tokio::test]
    async fn a_valid_frame_of_the_asked_size_in_chunks() {
        let r: Reply = serde_yaml::from_str("{kind: huge, bytes: 100000}").unwrap();
        let (outs, done) = collect(&r, &call("h"), 1000).await;
        assert_eq!(done, Some(true));
        let Out::Frame(f) = &outs[0] else { panic!() };
        let chunks: Vec<Vec<u8>> = f.chunks(4096).collect();
        assert!(chunks.iter().all(|c| c.len() <= 4096) && chunks.len() > 20);
        let all: Vec<u8> = chunks.concat();
        assert_eq!(all.len(), f.len());
        let v: serde_json::Value = serde_json::from_slice(&all).unwrap();
        let text = v["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("probe:h:") && text.len() == 100000 + 8);
        let bad: Reply = serde_yaml::from_str("{kind: huge, bytes: 0}").unwrap();
        assert!(bad.check("tools/call").is_err());
    }
}
