//! The built-in price table: what well-known models cost, in US dollars per million tokens
//! (input, output, cached input), as their providers list them. The operator's `[llm.prices]`
//! and an organization's own prices (`PUT /orgs/{org}/prices/{model}`) stand over it; a model
//! in none of them has token counts and no cost.
//!
//! A dated snapshot (`gpt-4o-2024-08-06`, `claude-sonnet-4-20250514`) or a provider prefix
//! (`openai/gpt-4o`) costs what its model does.

use super::config::Price;

const fn p(prompt: f64, completion: f64, cached: f64) -> Price {
    Price { prompt, completion, cached: Some(cached) }
}

/// The table, by model name.
pub static BUILTIN: &[(&str, Price)] = &[
    ("gpt-4o", p(2.5, 10.0, 1.25)),
    ("gpt-4o-mini", p(0.15, 0.6, 0.075)),
    ("gpt-4.1", p(2.0, 8.0, 0.5)),
    ("gpt-4.1-mini", p(0.4, 1.6, 0.1)),
    ("gpt-4.1-nano", p(0.1, 0.4, 0.025)),
    ("gpt-5", p(1.25, 10.0, 0.125)),
    ("gpt-5-mini", p(0.25, 2.0, 0.025)),
    ("gpt-5-nano", p(0.05, 0.4, 0.005)),
    ("o3", p(2.0, 8.0, 0.5)),
    ("o3-mini", p(1.1, 4.4, 0.55)),
    ("o4-mini", p(1.1, 4.4, 0.275)),
    ("claude-opus-4", p(15.0, 75.0, 1.5)),
    ("claude-opus-4-1", p(15.0, 75.0, 1.5)),
    ("claude-opus-4-5", p(5.0, 25.0, 0.5)),
    ("claude-sonnet-4", p(3.0, 15.0, 0.3)),
    ("claude-sonnet-4-5", p(3.0, 15.0, 0.3)),
    ("claude-3-7-sonnet", p(3.0, 15.0, 0.3)),
    ("claude-haiku-4-5", p(1.0, 5.0, 0.1)),
    ("claude-3-5-haiku", p(0.8, 4.0, 0.08)),
    ("gemini-2.5-pro", p(1.25, 10.0, 0.31)),
    ("gemini-2.5-flash", p(0.3, 2.5, 0.075)),
];

/// The built-in price of `model`, if it is a well-known one.
pub fn builtin(model: &str) -> Option<&'static Price> {
    let model = model.rsplit('/').next().unwrap_or(model);
    if let Some((_, price)) = BUILTIN.iter().find(|(name, _)| *name == model) {
        return Some(price);
    }
    // A dated snapshot: the longest name followed by `-` and a digit.
    BUILTIN
        .iter()
        .filter(|(name, _)| {
            model
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .max_by_key(|(name, _)| name.len())
        .map(|(_, price)| price)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_and_prefixes_cost_what_their_model_does() {
        assert_eq!(builtin("gpt-4o-mini").map(|p| p.prompt), Some(0.15));
        assert_eq!(builtin("gpt-4o-2024-08-06").map(|p| p.prompt), Some(2.5));
        assert_eq!(builtin("openai/gpt-4o-mini").map(|p| p.completion), Some(0.6));
        assert_eq!(builtin("claude-sonnet-4-5-20250929").map(|p| p.completion), Some(15.0));
        assert_eq!(builtin("claude-opus-4-5-20251101").map(|p| p.prompt), Some(5.0));
        assert!(builtin("gpt-4o-minimal").is_none() && builtin("scripted-model").is_none() && builtin("o3x").is_none());
    }
}
