//! Counting tokens as a model counts them, and how many a model can take.
//!
//! OpenAI's model families have public byte-pair encodings (`o200k_base` for GPT-4o, GPT-4.1,
//! GPT-5 and the o-series; `cl100k_base` for GPT-4 and GPT-3.5), and are counted exactly with
//! them. Every other model (Claude, Llama, Qwen...) publishes no tokenizer a client may run, so
//! its tokens are estimated at four bytes each, the average of those tokenizers on English and
//! code. A count only ever decides when to condense; the provider's own `usage` is what the
//! metrics record.

use tiktoken_rs::CoreBPE;

/// How a model's text is counted.
#[derive(Clone, Copy)]
pub enum TokenCounter {
    Bpe(&'static CoreBPE),
    /// Four bytes a token.
    Estimate,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_exact() { "TokenCounter::Bpe" } else { "TokenCounter::Estimate" })
    }
}

impl TokenCounter {
    /// The counter for `model` (loading a vocabulary takes ~100 ms, once per process).
    pub fn for_model(model: &str) -> Self {
        match family(model) {
            Family::O200k => Self::Bpe(tiktoken_rs::o200k_base_singleton()),
            Family::Cl100k => Self::Bpe(tiktoken_rs::cl100k_base_singleton()),
            Family::Other => Self::Estimate,
        }
    }

    /// Tokens of `text`.
    pub fn count(&self, text: &str) -> u64 {
        match self {
            Self::Bpe(bpe) => bpe.encode_ordinary(text).len() as u64,
            Self::Estimate => estimate(text),
        }
    }

    /// Whether this counter is exact for its model.
    pub fn is_exact(&self) -> bool {
        matches!(self, Self::Bpe(_))
    }
}

/// Four bytes a token, rounded up.
pub fn estimate(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

enum Family {
    O200k,
    Cl100k,
    Other,
}

/// The model's name without a provider prefix (`openai/gpt-4o` is `gpt-4o`).
fn base_name(model: &str) -> &str {
    model.rsplit('/').next().unwrap_or(model)
}

fn family(model: &str) -> Family {
    let m = base_name(model);
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| m.starts_with(p));
    if starts(&["gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss"]) {
        Family::O200k
    } else if starts(&["gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada"]) {
        Family::Cl100k
    } else {
        Family::Other
    }
}

/// The context window of well-known models, in tokens; 128,000 for any other (the common size
/// today; a smaller model's context-length error makes the agent condense and retry anyway).
pub fn known_context_window(model: &str) -> u64 {
    let m = base_name(model);
    let starts = |p: &str| m.starts_with(p);
    if starts("claude") {
        200_000
    } else if starts("gpt-4.1") {
        1_047_576
    } else if starts("gpt-5") {
        400_000
    } else if starts("o1") || starts("o3") || starts("o4") {
        200_000
    } else if starts("gpt-4o") || starts("gpt-4-turbo") || starts("gpt-4.5") {
        128_000
    } else if starts("gpt-4-32k") {
        32_768
    } else if starts("gpt-4") {
        8_192
    } else if starts("gpt-3.5") {
        16_385
    } else {
        128_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_families_are_counted_exactly() {
        let gpt4o = TokenCounter::for_model("gpt-4o-mini");
        assert!(gpt4o.is_exact());
        // "hello world" is two tokens in both OpenAI vocabularies.
        assert_eq!(gpt4o.count("hello world"), 2);
        assert_eq!(TokenCounter::for_model("openai/gpt-4").count("hello world"), 2);
        let claude = TokenCounter::for_model("claude-sonnet-4-5");
        assert!(!claude.is_exact());
        assert_eq!(claude.count("hello world"), 3);
        assert_eq!(known_context_window("anthropic/claude-opus-4"), 200_000);
        assert_eq!(known_context_window("gpt-4o-mini"), 128_000);
        assert_eq!(known_context_window("gpt-4-0613"), 8_192);
        assert_eq!(known_context_window("my-local-model"), 128_000);
    }
}
