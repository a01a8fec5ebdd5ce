//! Context condensation: when the prompt would pass the model's budget (its context window less
//! the reserve for the answer), the oldest part of what the LLM sees is summarized by the LLM
//! and replaced by that summary (a `condensation` event). The first user message, the latest
//! messages (about half the budget) and the log itself are kept whole.
//!
//! The cut falls between messages, never between an assistant's tool calls and their results,
//! so the kept part is always a valid conversation for either wire.

use halyard_platform::llm::ChatMessage;
use halyard_platform::tokens::TokenCounter;

use crate::history::{History, MESSAGE_OVERHEAD, message_tokens};

/// What to summarize.
#[derive(Debug)]
pub struct Plan {
    /// The messages to forget, in order.
    pub forget: Vec<ChatMessage>,
    pub from_seq: u64,
    pub upto_seq: u64,
    /// Prompt tokens now, and after the summary replaces what is forgotten (without the
    /// summary's own tokens).
    pub tokens_before: u64,
    pub tokens_kept: u64,
}

/// Tokens of the prompt built from `history` with a `fixed` part (system prompt and tools,
/// already counted). Counts each message once; while the text is smaller in bytes than
/// `budget`, it cannot be over budget in tokens, and nothing is counted at all.
pub fn prompt_tokens(history: &mut History, counter: &TokenCounter, fixed: u64, budget: u64) -> u64 {
    let summary = history.summary_message();
    let summary_bytes = summary.as_ref().map_or(0, |m| m.content.as_deref().map_or(0, str::len) as u64 + MESSAGE_OVERHEAD);
    let bytes: u64 = history.entries.iter().map(|e| e.bytes).sum::<u64>() + summary_bytes;
    if fixed + bytes <= budget {
        return fixed + bytes;
    }
    let summary_tokens = summary.as_ref().map_or(0, |m| message_tokens(m, counter));
    fixed + summary_tokens + history.entries.iter_mut().map(|e| e.tokens(counter)).sum::<u64>()
}

/// Chooses what to forget so that what is kept holds about `keep` tokens. `None` if there is
/// nothing to forget (the first user message and the newest messages are all there is).
pub fn plan(history: &mut History, counter: &TokenCounter, fixed: u64, keep: u64) -> Option<Plan> {
    let tokens_before = prompt_tokens(history, counter, fixed, 0);
    let first = history.first_user_seq;
    // Walk back from the newest message while the kept part fits.
    let mut kept = 0u64;
    let mut cut = history.entries.len();
    while cut > 0 {
        let e = &mut history.entries[cut - 1];
        let t = if Some(e.seq) == first { 0 } else { e.tokens(counter) };
        if kept + t > keep {
            break;
        }
        kept += t;
        cut -= 1;
    }
    // The kept part must not start with tool results whose calls would be forgotten.
    while cut < history.entries.len() && history.entries[cut].msg.role == "tool" {
        cut += 1;
    }
    let forget: Vec<usize> = (0..cut).filter(|&i| Some(history.entries[i].seq) != first).collect();
    let (&first_i, &last_i) = (forget.first()?, forget.last()?);
    let forgotten_tokens: u64 = forget.iter().map(|&i| history.entries[i].tokens(counter)).sum();
    let summary_tokens = history.summary_message().map_or(0, |m| message_tokens(&m, counter));
    Some(Plan {
        forget: forget.iter().map(|&i| history.entries[i].msg.clone()).collect(),
        from_seq: history.entries[first_i].seq,
        upto_seq: history.entries[last_i].seq,
        tokens_before,
        tokens_kept: tokens_before - forgotten_tokens - summary_tokens,
    })
}

/// The summarizer's instructions.
pub const SUMMARIZER: &str = "You condense the history of a coding agent's work so it can go on without the full \
    transcript. Write a concise summary that keeps: the user's goals and constraints; what was done (files created or \
    changed, commands run and what they showed); what was learned (errors, decisions, facts about the code); and what \
    is left to do. Keep exact names, paths, identifiers and numbers. Write only the summary.";

/// The summarization prompt: the previous summary and the forgotten messages as a transcript,
/// each cut to a share of `max_tokens` (head and tail kept), so the request itself fits.
pub fn request(previous: Option<&str>, plan: &Plan, max_tokens: u64) -> Vec<ChatMessage> {
    let budget_chars = (max_tokens as usize).saturating_mul(3);
    let per_message = (budget_chars / plan.forget.len().max(1)).clamp(200, 4000);
    let mut transcript = String::new();
    if let Some(previous) = previous {
        transcript.push_str(&format!("EARLIER SUMMARY:\n{}\n\n", abridge(previous, budget_chars / 3)));
    }
    for m in &plan.forget {
        let text = m.content.as_deref().unwrap_or_default();
        let line = match m.role.as_str() {
            "assistant" if !m.tool_calls.is_empty() => {
                let calls: Vec<String> = m.tool_calls.iter().map(|c| format!("{} {}", c.function.name, c.function.arguments)).collect();
                format!("AGENT ({}): {}", abridge(text, per_message / 4), calls.join("; "))
            }
            "assistant" => format!("AGENT: {text}"),
            "tool" => format!("RESULT: {text}"),
            _ => format!("USER: {text}"),
        };
        transcript.push_str(&abridge(&line, per_message));
        transcript.push('\n');
    }
    vec![
        ChatMessage::text("system", SUMMARIZER),
        ChatMessage::text("user", format!("<history>\n{}</history>\n\nSummarize this history.", abridge(&transcript, budget_chars))),
    ]
}

/// `text` cut to about `max` bytes, keeping its head and tail.
fn abridge(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let half = max / 2;
    let mut head = half;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - half;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{} [...] {}", &text[..head], &text[tail..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_event as ev;
    use halyard_protocol::event::{ConversationEvent, EventBody};

    fn step(seq: u64, n: u64) -> [ConversationEvent; 2] {
        [
            ev(
                seq,
                EventBody::Action {
                    tool_call_id: format!("c{n}"),
                    tool: "terminal".into(),
                    arguments: serde_json::json!({"command": format!("echo {n}")}),
                    thought: None,
                    security_risk: None,
                },
            ),
            ev(
                seq + 1,
                EventBody::Observation {
                    tool_call_id: format!("c{n}"),
                    tool: "terminal".into(),
                    content: "x".repeat(400),
                    exit_code: Some(0),
                    is_error: false,
                    url: None,
                    screenshot_id: None,
                    image_ids: Vec::new(),
                },
            ),
        ]
    }

    #[test]
    fn condensing_keeps_the_first_message_and_whole_steps_and_shrinks_the_prompt() {
        let mut events = vec![ev(1, EventBody::UserMessage { text: "do the task".into(), images: vec![], command: None })];
        for n in 0..20 {
            events.extend(step(2 + 2 * n, n));
        }
        let mut h = History::from_events(&events);
        let counter = TokenCounter::Estimate;
        let before = prompt_tokens(&mut h, &counter, 100, 0);
        let plan = plan(&mut h, &counter, 100, 500).expect("something to forget");
        assert_eq!(plan.from_seq, 2);
        assert_eq!(plan.forget[0].role, "assistant");
        assert_eq!(plan.tokens_before, before);
        assert!(plan.tokens_kept <= 100 + 500 + 10, "kept {}", plan.tokens_kept);
        let upto = plan.upto_seq;
        let condensed = ev(
            100,
            EventBody::Condensation { from_seq: 2, upto_seq: upto, summary: "Echoed numbers.".into(), tokens_before: 0, tokens_after: 0 },
        );
        h.apply(&condensed);
        let msgs = h.for_llm("sys");
        assert_eq!(msgs[1].content.as_deref(), Some("do the task"));
        assert!(msgs[2].content.as_deref().unwrap_or_default().contains("Echoed numbers."));
        assert_eq!(msgs[3].role, "assistant", "the kept part starts with a whole step");
        assert!(prompt_tokens(&mut h, &counter, 100, 0) < before / 2);
        // The transcript for the summarizer fits what it was given.
        let req = request(Some("older"), &plan, 300);
        assert!(req[1].content.as_deref().unwrap_or_default().len() < 300 * 3 + 200);
    }
}
