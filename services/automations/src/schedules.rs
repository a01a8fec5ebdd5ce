//! Schedules: each enabled `schedule` automation's ticks become `Tick` commands, exactly once
//! however many automation services run. A tick is claimed in the bucket (`tick.<id>` holds the
//! last claimed tick, written with the revision it was read at, so of two services that race
//! one wins) and only the winner sends it. After a stop, the latest tick missed is run once if
//! it is younger than the grace period (`HALYARD_AUTOMATION_TICK_GRACE_SECS`), never a burst
//! of old ones: only the latest due tick is ever looked at, and never one from before the
//! automation last changed (a tick missed while it was disabled is not owed when it is enabled).

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::kv;
use halyard_platform::bus;
use halyard_platform::schedule::Schedule;
use halyard_platform::{BusError, BusErrorKind, Shutdown};
use halyard_protocol::automation::{AutomationCommand, Trigger};
use halyard_protocol::{CommandId, Envelope, subjects};

use crate::ctx::Ctx;
use crate::decision::derived;

/// The longest sleep between looks at the schedules (a clock that jumps is noticed by then).
const MAX_SLEEP_MS: i64 = 30_000;

/// Claims and sends ticks until `shutdown`.
pub async fn run(ctx: Ctx, mut shutdown: Shutdown) {
    let grace_ms = i64::try_from(ctx.config.automations.tick_grace_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    let mut changes = ctx.automations.changes();
    // The last tick known claimed (by anyone) per automation: saves reading the bucket again.
    let mut claimed: HashMap<String, i64> = HashMap::new();
    loop {
        let now = halyard_platform::now_ms();
        let mut wake = now + MAX_SLEEP_MS;
        for a in ctx.automations.values() {
            let Trigger::Schedule { cron, timezone } = &a.trigger else { continue };
            if !a.enabled {
                continue;
            }
            let schedule = match Schedule::parse(cron, timezone) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(automation_id = %a.id, error = %e, "a schedule that does not parse never ticks");
                    continue;
                }
            };
            // A tick from before the last change (a new schedule, enabled again) is not owed.
            let due = schedule.last_at_or_before(now).filter(|due| *due >= a.updated_ms && now - due <= grace_ms);
            if let Some(due) = due.filter(|due| claimed.get(&a.id).is_none_or(|c| c < due)) {
                match claim(&ctx.bucket, &a.id, due).await {
                    Ok(Claim::Won) => match send(&ctx, &a.id, due).await {
                        Ok(()) => {
                            tracing::info!(automation_id = %a.id, tick = %halyard_protocol::rfc3339(due), "schedule tick");
                            claimed.insert(a.id.clone(), due);
                        }
                        Err(e) => tracing::error!(automation_id = %a.id, error = %e, "a claimed tick was not sent"),
                    },
                    Ok(Claim::Taken(last)) => {
                        claimed.insert(a.id.clone(), last);
                    }
                    Err(e) => {
                        tracing::warn!(automation_id = %a.id, error = %e, "cannot claim a tick; trying again");
                        wake = wake.min(now + 1000);
                    }
                }
            }
            if let Some(next) = schedule.next_after(now) {
                wake = wake.min(next);
            }
        }
        let sleep = Duration::from_millis(u64::try_from(wake - halyard_platform::now_ms()).unwrap_or(0));
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = changes.changed() => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

/// How a claim went.
enum Claim {
    Won,
    /// Someone claimed this tick or a later one: the last claimed.
    Taken(i64),
}

/// Claims `due` for automation `id`, unless it (or a later tick) is claimed already.
async fn claim(bucket: &kv::Store, id: &str, due: i64) -> Result<Claim, BusError> {
    let key = subjects::automation_tick_key(id);
    let entry = bucket.entry(&key).await.map_err(|e| BusError::new(BusErrorKind::Read, e))?;
    let (last, revision) = match &entry {
        Some(e) if e.operation == kv::Operation::Put => (std::str::from_utf8(&e.value).ok().and_then(|v| v.parse().ok()), Some(e.revision)),
        Some(e) => (None, Some(e.revision)),
        None => (None, None),
    };
    if let Some(last) = last.filter(|last| *last >= due) {
        return Ok(Claim::Taken(last));
    }
    let value = due.to_string().into_bytes().into();
    let won = match revision {
        Some(r) => bucket.update(&key, value, r).await.is_ok(),
        None => bucket.create(&key, value).await.is_ok(),
    };
    // Lost: whoever won wrote this tick (or a later one); it is theirs to send.
    Ok(if won { Claim::Won } else { Claim::Taken(due) })
}

async fn send(ctx: &Ctx, id: &str, due: i64) -> Result<(), BusError> {
    let cmd = AutomationCommand::Tick { automation_id: id.to_owned(), tick_ms: due };
    let env = Envelope::with_id(CommandId(derived(&["tick", id, &due.to_string()])), cmd, halyard_platform::now_ms());
    bus::publish(&ctx.js, subjects::automation_command(id), &env).await.map(|_| ())
}
