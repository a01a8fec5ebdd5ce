//! The automation service: work that starts without a user at the keyboard. It follows the
//! automations (the `halyard_automations` bucket, in memory), takes the verified hook requests
//! the gateways hand on and the schedule ticks it claims ([`schedules`]), decides what each one
//! starts ([`runs`]), starts conversations through the conversation manager as any client does,
//! and records every decision as a run (`halyard.sys.automation.<id>`), so that a user can see
//! why a request started nothing. It also runs batches ([`batches`]): many starts, a few at a
//! time.
//!
//! Every step is a durable command: a request the gateway took is on the bus before the forge
//! hears back, so a slow start or a restart of this service loses nothing, and ids derived from
//! what triggered a run make a redelivered command start nothing twice.

pub mod batches;
pub mod ctx;
pub mod decision;
pub mod forge;
pub mod forge_runs;
pub mod kinds;
pub mod prompt;
pub mod runs;
pub mod schedules;
pub mod start_failures;
pub mod summaries;
pub mod threads;
pub mod tracker;
pub mod tracker_runs;

use std::sync::Arc;

use async_nats::jetstream;
use halyard_platform::bus;
use halyard_platform::kv_mirror::Mirror;
use halyard_platform::vault::Vault;

use crate::ctx::Ctx;
use halyard_platform::{BusError, Config, Shutdown};
use halyard_protocol::automation::AutomationCommand;
use halyard_protocol::subjects;

/// Why the automation service failed.
#[derive(Debug, thiserror::Error)]
pub enum AutomationError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot start the automation service: {0}")]
    Setup(String),
}

/// Serves until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), AutomationError> {
    let js = jetstream::new(nats);
    let setup = |e: &dyn std::fmt::Display| AutomationError::Setup(e.to_string());
    let bucket = js.get_key_value(subjects::AUTOMATION_BUCKET).await.map_err(|e| setup(&e))?;
    let user_kv = js.get_key_value(subjects::USER_BUCKET).await.map_err(|e| setup(&e))?;
    let automations = Mirror::follow(bucket.clone(), "def.", shutdown.clone()).await?;
    let vault = Arc::new(Vault::new(&config.secret).map_err(|e| setup(&e))?);
    let ctx = Ctx { config, js: js.clone(), bucket, user_kv, automations, vault };

    let ticks = tokio::spawn(schedules::run(ctx.clone(), shutdown.clone()));
    let summaries = tokio::spawn(summaries::run(ctx.clone(), shutdown.clone()));
    let start_failures = tokio::spawn(start_failures::run(ctx.clone(), shutdown.clone()));
    let batches = tokio::spawn(batches::run(ctx.clone(), shutdown.clone()));
    let served = bus::consume(js, subjects::COMMANDS_STREAM, subjects::AUTOMATION_CONSUMER, "automations", shutdown, |d| {
        let ctx = ctx.clone();
        async move {
            let Some((env, d)) = d.decode::<AutomationCommand>().await else { return };
            // Each command on its own task: one slow owner's start does not hold the others.
            tokio::spawn(async move {
                match runs::handle(&ctx, env).await {
                    Ok(()) => d.ack().await,
                    Err(e) => d.retry(std::time::Duration::from_secs(1), &e.to_string()).await,
                }
            });
        }
    })
    .await;
    ticks.abort();
    summaries.abort();
    start_failures.abort();
    batches.abort();
    served.map_err(AutomationError::from)
}
