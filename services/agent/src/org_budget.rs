//! An organization's monthly budgets, as its conversations keep them. Before each LLM call a run
//! in an organization reads the budgets and this month's spending and stops, with
//! `budget_exhausted`, once either the organization's or the member's is spent. After each
//! priced call it adds the cost to the month's spending (compare-and-set on the record's
//! revision, so runs on other replicas never lose each other's spending) and appends a
//! `budget_alert` for every share of a budget passed for the first time this month.
//!
//! The usage reports count the same calls from the log (the gateway's projection); this record
//! is what enforcement reads, one key per organization and month, without waiting for a
//! projection to catch up.

use async_nats::jetstream::kv;
use bytes::Bytes;
use halyard_protocol::org::{BudgetCrossing, OrgBudget, OrgPrices, OrgSpend, budget_month};
use halyard_protocol::{UserId, subjects};

use crate::ctx::Ctx;

/// How often a write that lost a race to another run is tried again.
const ATTEMPTS: usize = 32;

async fn read<T: serde::de::DeserializeOwned + Default>(store: &kv::Store, key: &str) -> Result<(T, Option<u64>), String> {
    match store.entry(key).await.map_err(|e| format!("{key}: {e}"))? {
        Some(e) if e.operation == kv::Operation::Put => {
            Ok((serde_json::from_slice(&e.value).map_err(|e| format!("{key}: {e}"))?, Some(e.revision)))
        }
        Some(e) => Ok((T::default(), Some(e.revision))),
        None => Ok((T::default(), None)),
    }
}

/// Why `user`'s conversations in `org` may make no LLM call now (`None`: they may).
pub async fn refused(ctx: &Ctx, org: &str, user: &UserId) -> Result<Option<String>, String> {
    let (budget, _) = read::<OrgBudget>(&ctx.user_kv, &subjects::org_budget_key(org)).await?;
    if budget == OrgBudget::default() {
        return Ok(None);
    }
    let month = budget_month(halyard_platform::now_ms());
    let (spend, _) = read::<OrgSpend>(&ctx.user_kv, &subjects::org_spend_key(org, &month)).await?;
    Ok(spend.exhausted(user, &budget).map(|e| e.message(org)))
}

/// Adds `usd` that `user`'s conversation in `org` spent; the alerts now due.
pub async fn spend(ctx: &Ctx, org: &str, user: &UserId, usd: f64) -> Result<(String, Vec<BudgetCrossing>), String> {
    let (budget, _) = read::<OrgBudget>(&ctx.user_kv, &subjects::org_budget_key(org)).await?;
    let month = budget_month(halyard_platform::now_ms());
    let key = subjects::org_spend_key(org, &month);
    for _ in 0..ATTEMPTS {
        let (mut spend, revision) = read::<OrgSpend>(&ctx.user_kv, &key).await?;
        let due = spend.add(user, usd, &budget);
        let bytes = Bytes::from(serde_json::to_vec(&spend).map_err(|e| e.to_string())?);
        // Another run wrote first: add to what it wrote. Anything else is no race.
        let written = match revision {
            Some(r) => ctx
                .user_kv
                .update(&key, bytes, r)
                .await
                .map(drop)
                .map_err(|e| (e.kind() == kv::UpdateErrorKind::WrongLastRevision, e.to_string())),
            None => {
                ctx.user_kv.create(&key, bytes).await.map(drop).map_err(|e| (e.kind() == kv::CreateErrorKind::AlreadyExists, e.to_string()))
            }
        };
        match written {
            Ok(()) => return Ok((month, due)),
            Err((true, e)) => tracing::debug!(org, error = %e, "the month's spending changed meanwhile; adding again"),
            Err((false, e)) => return Err(format!("{key}: {e}")),
        }
    }
    Err(format!("{key}: too many concurrent writers"))
}

/// The organization's prices, as the LLM clients take them.
pub fn prices_of(prices: OrgPrices) -> std::collections::BTreeMap<String, halyard_platform::llm::Price> {
    prices
        .prices
        .into_iter()
        .map(|(model, p)| {
            let price = halyard_platform::llm::Price {
                prompt: p.input_per_million,
                completion: p.output_per_million,
                cached: p.cached_per_million,
            };
            (model, price)
        })
        .collect()
}
