//! `malformed`: a frame that is not JSON-RPC (`text`, default a truncated
//! JSON object; one line, since stdio frames are newline-delimited) where the
//! answer should be. The request is never answered properly.

use serde::{Deserialize, Serialize};

use super::{Ctx, Frame};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Malformed {
    #[serde(default = "default_text")]
    pub text: String,
}

fn default_text() -> String {
    "{\"jsonrpc\": \"2.0\", \"id\": <not json-rpc> \u{1}\u{7f} [[[".into()
}

impl Malformed {
    fn check_bounds(&self) -> Result<(), String> {
        if self.text.contains('\n') || self.text.contains('\r') {
            return Err("`malformed.text` must be one line (stdio frames end at a newline)".into());
        }
        Ok(())
    }

    pub(crate) fn frame(&self, ctx: &Ctx) -> Frame {
        Frame::Bytes(ctx.render(&self.text).into_bytes())
    }
}

impl crate::kinds::Kind for Malformed {
    const NAME: &'static str = "malformed";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        ends_call: true,
        ..crate::kinds::Facts::NONE
    };
}

impl super::McpReply for Malformed {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(async move {
            super::send(tx, super::Out::Frame(self.frame(ctx))).await;
            false
        })
    }

    fn single_frame(&self) -> bool {
        true
    }

    fn check(&self, _method: &str) -> Result<(), String> {
        self.check_bounds()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect};
    use super::super::{Frame, Out, Reply};

    #[tokio::test]
    async fn one_unparseable_frame_and_no_answer() {
        let r: Reply = serde_yaml::from_str("{kind: malformed}").unwrap();
        let (outs, done) = collect(&r, &call("x"), 1000).await;
        assert_eq!(done, Some(false));
        let Out::Frame(Frame::Bytes(b)) = &outs[0] else {
            panic!()
        };
        assert!(serde_json::from_slice::<serde_json::Value>(b).is_err());
        assert!(!b.contains(&b'\n'));
        let bad: Reply = serde_yaml::from_str("{kind: malformed, text: \"a\\nb\"}").unwrap();
        assert!(bad.check("tools/call").is_err());
    }
}
