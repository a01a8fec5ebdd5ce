//! Which agent drives a run: Halyard's own loop ([`crate::run_loop`]) or a third-party agent
//! this runner is the ACP client of ([`crate::acp`]). Both are set up the same way first
//! ([`Run::prepare`]); a run ends once its last checkpoint is taken.

use crate::run_loop::{Run, RunOutcome};

/// Runs `run` to its end.
pub async fn run(mut run: Run) -> RunOutcome {
    let outcome = match run.prepare().await {
        Err(ended) => ended,
        Ok(ready) => match ready.agent.clone().filter(|a| crate::acp::is_third_party(Some(a))) {
            Some(name) => crate::acp::drive(&run, &ready.exec, &name, ready.mcp_configs).await,
            None => run.builtin(ready).await,
        },
    };
    run.checkpoint_settled().await;
    outcome
}
