//! Answers as the model writes them. While an LLM call streams, its text goes out piece by piece
//! on core NATS ([`subjects::answer_deltas`]), never into the log, which gets the finished answer
//! as before; the text so far is kept here while the call lasts, for readers who come in the
//! middle ([`subjects::answer_so_far`], answered by the runner holding the run).
//!
//! The owner's secrets are masked in the pieces as in the log: each piece is cut from the masked
//! text so far, less its last bytes, which could hold the start of a value the next piece
//! completes; they go out with the next piece, or masked at their edge when the answer ends.

use std::sync::Arc;

use futures::StreamExt;
use halyard_platform::llm::Deltas;
use halyard_platform::redact::Redactor;
use halyard_protocol::envelope::Envelope;
use halyard_protocol::event::AnswerDelta;
use halyard_protocol::{ConversationId, subjects};

use crate::ctx::Ctx;

/// Answers `halyard.sofar.<conversation>` for the answers being written here; a runner that holds
/// none stays silent, so only the one that holds the run answers.
pub async fn serve_so_far(ctx: Arc<Ctx>, mut shutdown: halyard_platform::Shutdown) {
    let mut asked = match ctx.nats.subscribe(subjects::ALL_ANSWERS_SO_FAR).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot subscribe to questions for answers so far; late readers see them from their end");
            return;
        }
    };
    loop {
        let msg = tokio::select! {
            _ = shutdown.wait() => return,
            m = asked.next() => match m { Some(m) => m, None => return },
        };
        let Some(reply) = msg.reply else { continue };
        let Some(id) = msg.subject.rsplit('.').next().and_then(|id| id.parse::<ConversationId>().ok()) else { continue };
        let Some(so_far) = ctx.answers.with(|a| a.get(&id).cloned()) else { continue };
        if let Ok(bytes) = halyard_protocol::encode(&Envelope::new(so_far, halyard_platform::now_ms())) {
            let _ = ctx.nats.publish(reply, bytes.into()).await;
        }
    }
}

/// Publishes one answer of conversation `id` (begun when the log ended at `after_seq`), masked
/// by `redactor`, as the LLM call sends its pieces to the returned sender; the task ends, and
/// the answer is forgotten, once the call has dropped the sender and every piece is out.
pub(crate) fn publish(
    ctx: &Arc<Ctx>,
    id: ConversationId,
    after_seq: u64,
    redactor: Arc<Redactor>,
) -> (Deltas, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Option<String>>();
    let ctx = ctx.clone();
    let task = tokio::spawn(async move {
        let subject = subjects::answer_deltas(id);
        let mut answer = Masked { redactor, raw: String::new(), sent: 0 };
        let mut pieces = 0u64;
        loop {
            let (text, whole) = match rx.recv().await {
                Some(Some(piece)) => match answer.push(&piece) {
                    Some(text) => (text, false),
                    None => continue,
                },
                // Started again from nothing: the whole text so far is now empty (said only if
                // some of it went out).
                Some(None) => {
                    answer.raw.clear();
                    answer.sent = 0;
                    if pieces == 0 {
                        continue;
                    }
                    (String::new(), true)
                }
                None => match answer.rest() {
                    Some(text) => (text, false),
                    None => break,
                },
            };
            let from = pieces;
            pieces += 1;
            let delta = ctx.answers.with(|a| {
                let so_far = a.entry(id).or_insert_with(|| AnswerDelta { after_seq, ..Default::default() });
                so_far.to = pieces;
                if whole {
                    so_far.text.clear();
                    return so_far.clone();
                }
                so_far.text.push_str(&text);
                AnswerDelta { after_seq, from, to: pieces, text }
            });
            metrics::counter!("halyard_answer_deltas_total").increment(1);
            if let Ok(bytes) = halyard_protocol::encode(&Envelope::new(delta, halyard_platform::now_ms())) {
                let _ = ctx.nats.publish(subject.clone(), bytes.into()).await;
            }
        }
        ctx.answers.with(|a| a.remove(&id));
        // Out before the finished answer is appended, so readers see the pieces first (an
        // answer that sent none costs no round trip).
        if pieces > 0 {
            let _ = ctx.nats.flush().await;
        }
    });
    (tx, task)
}

/// An answer's text as it arrives, and how much of its masked form has gone out.
struct Masked {
    redactor: Arc<Redactor>,
    raw: String,
    /// Bytes of the masked text sent (`usize::MAX` once the rest was).
    sent: usize,
}

impl Masked {
    /// Adds a piece; what of the masked text can go out now.
    fn push(&mut self, piece: &str) -> Option<String> {
        self.raw.push_str(piece);
        let masked = self.redactor.redact(&self.raw);
        let mut stable = masked.len().saturating_sub(self.redactor.longest().saturating_sub(1));
        while !masked.is_char_boundary(stable) {
            stable -= 1;
        }
        let text = masked.get(self.sent..stable).filter(|t| !t.is_empty())?.to_owned();
        self.sent = stable;
        Some(text)
    }

    /// What was held back, once the answer has ended: a value's start at its very end masked.
    fn rest(&mut self) -> Option<String> {
        if self.sent == usize::MAX {
            return None;
        }
        let masked = self.redactor.redact(&self.raw);
        let rest = masked.get(self.sent..).filter(|t| !t.is_empty()).map(|tail| self.redactor.redact_edges(tail));
        self.sent = usize::MAX;
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_split_across_pieces_never_goes_out_and_the_rest_follows_masked() {
        let redactor = Arc::new(Redactor::new(vec![("TOKEN".into(), "hunter2-secret".into())]));
        let mut answer = Masked { redactor, raw: String::new(), sent: 0 };
        let mut out = String::new();
        for piece in ["Your token is hun", "ter2-se", "cret, and that is all. It ends with hunt"] {
            out.push_str(&answer.push(piece).unwrap_or_default());
            assert!(!out.contains("hunter2") && !out.contains("ter2-se"), "{out}");
        }
        out.push_str(&answer.rest().unwrap_or_default());
        assert!(out.starts_with("Your token is <secret:TOKEN>, and that is all. It ends with"), "{out}");
        assert!(!out.ends_with("hunt"), "a value's start at the end is masked too: {out}");
        assert_eq!(answer.rest(), None);
    }
}
