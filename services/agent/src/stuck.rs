//! Stuck detection: a model that repeats itself would otherwise loop until the iteration limit,
//! spending tokens for nothing. The run keeps its steps (each action with its observation) and,
//! after every step, asks whether the latest ones form one of four patterns, as OpenHands'
//! stuck detector does:
//!
//! - the same action with the same observation, `repeats` times in a row;
//! - the same action failing with the same error, `errors` times in a row;
//! - a monologue: `monologue` `think` calls in a row and nothing else;
//! - an alternating pair: A, B, A, B... (actions and observations alike), `alternations` times
//!   each.
//!
//! A loop that makes progress is not stuck: the same command whose output changes (polling a
//! build, counting down) repeats its action but not its observation. A threshold of 0 turns a
//! pattern off.

use halyard_platform::config::AgentConfig;

/// One step of a run: what the agent did and what came of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The tool and its arguments (canonical JSON).
    pub action: String,
    pub tool: String,
    pub observation: String,
    pub is_error: bool,
}

/// The thresholds, from the agent configuration.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    pub repeats: usize,
    pub errors: usize,
    pub monologue: usize,
    pub alternations: usize,
}

impl Thresholds {
    pub fn from_config(c: &AgentConfig) -> Self {
        Self { repeats: c.stuck_repeats, errors: c.stuck_errors, monologue: c.stuck_monologue, alternations: c.stuck_alternations }
    }
}

/// Which pattern the latest steps form, said for people; `None` if the run is not stuck.
pub fn detect(steps: &[Step], t: Thresholds) -> Option<String> {
    let last = steps.last()?;
    let tail = |n: usize| (n > 0 && steps.len() >= n).then(|| &steps[steps.len() - n..]);
    if let Some(tail) = tail(t.errors) {
        if last.is_error && tail.iter().all(|s| s == last) {
            return Some(format!(
                "the same action failed with the same error {} times in a row ({}: {})",
                t.errors,
                last.tool,
                first_line(&last.observation)
            ));
        }
    }
    if let Some(tail) = tail(t.repeats) {
        if tail.iter().all(|s| s == last) {
            return Some(format!("the same action gave the same result {} times in a row ({})", t.repeats, first_line(&last.action)));
        }
    }
    if let Some(tail) = tail(t.monologue) {
        if tail.iter().all(|s| s.tool == "think") {
            return Some(format!("the agent only talked to itself: {} `think` calls in a row and no other action", t.monologue));
        }
    }
    if let Some(tail) = tail(t.alternations * 2) {
        let (a, b) = (&tail[0], &tail[1]);
        if a != b && tail.chunks(2).all(|pair| &pair[0] == a && &pair[1] == b) {
            return Some(format!(
                "the agent alternated between two actions {} times each, with the same results ({} / {})",
                t.alternations,
                first_line(&a.action),
                first_line(&b.action)
            ));
        }
    }
    None
}

fn first_line(s: &str) -> String {
    let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    line.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds { repeats: 4, errors: 3, monologue: 5, alternations: 3 };

    fn step(action: &str, observation: &str, is_error: bool) -> Step {
        let tool = if action.starts_with("think") { "think" } else { "terminal" };
        Step { action: action.into(), tool: tool.into(), observation: observation.into(), is_error }
    }

    #[test]
    fn each_pattern_is_named() {
        let same = vec![step("ls", "a b", false); 4];
        assert!(detect(&same, T).unwrap().contains("same result 4 times"));
        assert!(detect(&same[..3], T).is_none());

        let failing = vec![step("make", "error: no rule", true); 3];
        assert!(detect(&failing, T).unwrap().contains("failed with the same error 3 times"));

        let thinking: Vec<Step> = (0..5).map(|i| step(&format!("think {i}"), "", false)).collect();
        assert!(detect(&thinking, T).unwrap().contains("only talked to itself"));

        let mut pairs = Vec::new();
        for _ in 0..3 {
            pairs.push(step("cd a", "", false));
            pairs.push(step("cd b", "", false));
        }
        assert!(detect(&pairs, T).unwrap().contains("alternated"));
        assert!(detect(&pairs[..5], T).is_none());
    }

    #[test]
    fn a_loop_that_makes_progress_is_not_stuck() {
        let counting: Vec<Step> = (0..20).map(|i| step("cat counter", &i.to_string(), false)).collect();
        assert!(detect(&counting, T).is_none());
        let polling: Vec<Step> = (0..10).map(|i| step("make", &format!("error: {i} left"), true)).collect();
        assert!(detect(&polling, T).is_none());
        let mixed = vec![step("think a", "", false), step("ls", "x", false), step("think b", "", false)];
        assert!(detect(&mixed, T).is_none());
        let off = Thresholds { repeats: 0, errors: 0, monologue: 0, alternations: 0 };
        assert!(detect(&vec![step("ls", "a", false); 50], off).is_none());
    }
}
