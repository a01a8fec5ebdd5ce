//! Budgets: what a conversation's LLM calls may use in all (tokens, US dollars), checked before
//! each call against what the calls so far used (their `llm_call` events) plus an estimate of
//! the next one, so a run ends with `budget_exceeded` before a call would pass a limit, not
//! after.

use halyard_platform::llm::Price;
use halyard_platform::llm::{ChatMessage, Completion};

use crate::history::History;

/// Tokens of a prompt, estimated at four characters a token (what OpenAI's tokenizers average on
/// English and code); used where the provider reports no usage, and for the next call's size.
pub fn estimate_tokens(messages: &[ChatMessage]) -> u64 {
    let chars: usize = messages
        .iter()
        .map(|m| {
            m.content.as_deref().map_or(0, str::len)
                + m.tool_calls.iter().map(|c| c.function.name.len() + c.function.arguments.len()).sum::<usize>()
                + 4
        })
        .sum();
    (chars as u64).div_ceil(4)
}

/// The next prompt's size, from `estimate` (its messages, by [`estimate_tokens`]): once a call
/// was made in this run, scaled as the provider counted that call against its estimate (the
/// provider counts what the estimate does not see: the tools' definitions, the wire's syntax,
/// its tokenizer), never below the estimate; else the estimate alone.
pub fn next_prompt(history: &History, estimate: u64) -> u64 {
    match history.prompt_estimate_at_last_call {
        Some(then) if then > 0 && history.last_prompt_tokens > then => {
            (u128::from(estimate) * u128::from(history.last_prompt_tokens)).div_ceil(u128::from(then)) as u64
        }
        _ => estimate,
    }
}

/// Tokens of an answer, estimated the same way.
pub fn estimate_completion(c: &Completion) -> u64 {
    let chars = c.content.as_deref().map_or(0, str::len)
        + c.tool_calls.iter().map(|t| t.function.name.len() + t.function.arguments.len()).sum::<usize>();
    (chars as u64).div_ceil(4).max(1)
}

/// Why the next call, of about `next_prompt` tokens, may not be made; `None` if it may. Its
/// answer is expected to be as long as the longest so far (a prompt alone would let the answer
/// pass the limit).
pub fn exceeded(history: &History, next_prompt: u64, price: Option<&Price>) -> Option<String> {
    let budget = &history.budget;
    let answer = history.longest_answer;
    if let Some(max) = budget.max_tokens {
        if history.used_tokens + next_prompt + answer > max {
            return Some(format!(
                "The conversation's token budget of {max} would be passed: its LLM calls used {} tokens, and the next one \
                 needs about {}. Start a new conversation with a larger `max_tokens` (POST /api/v1/conversations; your default: PUT /api/v1/settings).",
                history.used_tokens,
                next_prompt + answer
            ));
        }
    }
    if let (Some(max), Some(price)) = (budget.max_budget_usd, price) {
        let next = price.cost(next_prompt, answer, 0);
        if history.used_usd + next > max {
            return Some(format!(
                "The conversation's budget of ${max:.2} would be passed: its LLM calls cost ${:.4}, and the next one about \
                 ${next:.4}. Start a new conversation with a larger `max_budget_usd` (POST /api/v1/conversations; your default: PUT /api/v1/settings).",
                history.used_usd
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use halyard_protocol::event::Budget;

    #[test]
    fn the_next_call_is_refused_before_it_passes_a_limit() {
        let mut h = History { budget: Budget { max_tokens: Some(1000), max_budget_usd: Some(0.01) }, ..Default::default() };
        h.used_tokens = 900;
        assert!(exceeded(&h, 99, None).is_none());
        assert!(exceeded(&h, 101, None).unwrap().contains("token budget of 1000"));
        let price = Price { prompt: 10.0, completion: 30.0, cached: None };
        h.used_tokens = 0;
        h.used_usd = 0.009;
        assert!(exceeded(&h, 99, Some(&price)).is_none(), "$0.00999 fits in $0.01");
        assert!(exceeded(&h, 200, Some(&price)).unwrap().contains("budget of $0.01"));
        assert!(exceeded(&h, 200, None).is_none(), "no price: no dollar limit to check");
        let msgs = [ChatMessage::text("user", "x".repeat(400))];
        assert_eq!(estimate_tokens(&msgs), 101);
    }

    #[test]
    fn the_next_prompt_is_scaled_as_the_provider_counted_the_last_and_its_answer_counts_too() {
        let mut h = History::default();
        assert_eq!(next_prompt(&h, 400), 400, "no call yet: the estimate");
        // The provider counted 600 where the estimate said 400 (tools, syntax, its tokenizer).
        h.prompt_estimate_at_last_call = Some(400);
        h.last_prompt_tokens = 600;
        assert_eq!(next_prompt(&h, 500), 750);
        h.last_prompt_tokens = 300;
        assert_eq!(next_prompt(&h, 500), 500, "never below the estimate");
        // An answer as long as the longest so far is expected to follow.
        h.budget = Budget { max_tokens: Some(1000), max_budget_usd: None };
        h.used_tokens = 900;
        h.longest_answer = 20;
        assert!(exceeded(&h, 80, None).is_none());
        assert!(exceeded(&h, 81, None).unwrap().contains("needs about 101"));
    }
}
