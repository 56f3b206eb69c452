//! `crash`: after `after` seconds (default 0.2) the server dies mid-call:
//! the stdio shim exits with status 1 (its pipes close); over HTTP the
//! request's connection is reset with the SSE stream open. No answer.

use serde::{Deserialize, Serialize};

use super::{send, wait, Ctx, Out, Tx};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Crash {
    #[serde(default = "default_after", deserialize_with = "crate::units::seconds")]
    pub after: f64,
}

fn default_after() -> f64 {
    0.2
}

impl Crash {
    pub(crate) async fn play(&self, ctx: &Ctx, tx: &Tx) -> bool {
        if wait(self.after, &ctx.cancel).await {
            send(tx, Out::Crash).await;
        }
        false
    }
}

impl crate::kinds::Kind for Crash {
    const NAME: &'static str = "crash";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        ends_call: true,
        ..crate::kinds::Facts::NONE
    };
}

impl super::McpReply for Crash {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(self.play(ctx, tx))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect};
    use super::super::{Out, Reply};

    #[tokio::test]
    async fn crashes_without_an_answer() {
        let r: Reply = serde_yaml::from_str("{kind: crash, after: 0}").unwrap();
        let (outs, done) = collect(&r, &call("x"), 1000).await;
        assert_eq!((outs, done), (vec![Out::Crash], Some(false)));
    }
}
