//! What an organization's LLM calls cost and may cost: its price table
//! (`/orgs/{org}/prices/{model}`, over the operator's prices and the built-in table, which the
//! agent runner prices its conversations' calls by) and its monthly budgets' state
//! (`/orgs/{org}/budget`: this month's spending against them, what the page's banner shows). The
//! budgets themselves are settings (`PUT /orgs/{org}/settings`), copied where the agent runner
//! reads them ([`mirror_budget`]); a start or message that a spent budget would not let call
//! the LLM is refused with 402 `budget_exhausted` ([`check_start`]).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use halyard_protocol::org::{ModelPrice, Org, OrgBudget, OrgPrices, OrgSpend, budget_month};
use halyard_protocol::{UserId, subjects};

use crate::audit::{self, Client};
use crate::auth::User;
use crate::auth::access::{load, load_managed};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

/// One model's price and where it comes from.
#[derive(Debug, Serialize, ToSchema)]
pub struct PriceView {
    pub model: String,
    pub input_per_million: f64,
    pub output_per_million: f64,
    pub cached_per_million: Option<f64>,
    /// `org` (the organization's own), `operator` (the deployment's) or `builtin`.
    pub source: &'static str,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PriceList {
    pub items: Vec<PriceView>,
}

fn view(model: &str, p: &ModelPrice, source: &'static str) -> PriceView {
    PriceView {
        model: model.to_owned(),
        input_per_million: p.input_per_million,
        output_per_million: p.output_per_million,
        cached_per_million: p.cached_per_million,
        source,
    }
}

fn from_config(p: &halyard_platform::llm::Price) -> ModelPrice {
    ModelPrice { input_per_million: p.prompt, output_per_million: p.completion, cached_per_million: p.cached }
}

/// The prices the organization's conversations are charged at (any member): its own, then
/// the operator's, then the built-in table's, one row per model.
#[utoipa::path(get, path = "/orgs/{org}/prices", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = PriceList), Refusals))]
pub async fn list_prices(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<PriceList>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    let (own, _) = user_store::load::<OrgPrices>(&state, &subjects::org_price_key(&org.name)).await?;
    let mut rows: std::collections::BTreeMap<String, PriceView> = std::collections::BTreeMap::new();
    for (model, p) in halyard_platform::llm::prices::BUILTIN {
        rows.insert((*model).to_owned(), view(model, &from_config(p), "builtin"));
    }
    for (model, p) in &state.config.llm.prices {
        rows.insert(model.clone(), view(model, &from_config(p), "operator"));
    }
    for (model, p) in &own.prices {
        rows.insert(model.clone(), view(model, p, "org"));
    }
    Ok(Json(PriceList { items: rows.into_values().collect() }))
}

fn check_price(p: &ModelPrice) -> Result<(), ApiError> {
    let ok = |v: f64| v.is_finite() && (0.0..=1e6).contains(&v);
    if ok(p.input_per_million) && ok(p.output_per_million) && p.cached_per_million.is_none_or(ok) {
        Ok(())
    } else {
        Err(ApiError::bad_request("invalid_field", "prices are US dollars per million tokens: numbers from 0 to 1000000"))
    }
}

fn check_model(model: &str) -> Result<(), ApiError> {
    if (1..=128).contains(&model.len()) && !model.chars().any(|c| c.is_control() || c.is_whitespace()) {
        Ok(())
    } else {
        Err(ApiError::bad_request("invalid_field", "`model`: the model's name as its provider spells it, 1 to 128 characters, no spaces"))
    }
}

/// Sets what the organization's calls to `model` cost (owners and admins): 201 when new, 200
/// when changed. It applies from each conversation's next run.
#[utoipa::path(put, path = "/orgs/{org}/prices/{model}", tag = "orgs", params(("org" = String, Path), ("model" = String, Path)),
    request_body = ModelPrice, responses((status = 200, body = PriceView), (status = 201, body = PriceView), Refusals, BodyRefusals, Conflict))]
pub async fn put_price(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((name, model)): Path<(String, String)>,
    ApiJson(body): ApiJson<ModelPrice>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, "only the organization's owners and admins set its prices")?;
    check_model(&model)?;
    check_price(&body)?;
    let created = user_store::modify(&state, &subjects::org_price_key(&org.name), |p: &mut OrgPrices| {
        Ok(p.prices.insert(model.clone(), body).is_none())
    })
    .await?;
    let detail = serde_json::to_value(body).unwrap_or_default();
    audit::Action::new(&user, "org.price.put", &format!("{}/{model}", org.name)).detail(detail).org(&org.name).send(&state, client).await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view(&model, &body, "org"))))
}

/// Removes the organization's own price of `model`: the operator's or the built-in one applies
/// again.
#[utoipa::path(delete, path = "/orgs/{org}/prices/{model}", tag = "orgs", params(("org" = String, Path), ("model" = String, Path)),
    responses((status = 204), Refusals))]
pub async fn delete_price(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((name, model)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, "only the organization's owners and admins set its prices")?;
    user_store::remove_named(&state, &subjects::org_price_key(&org.name), |p: &mut OrgPrices| &mut p.prices, &model, "price").await?;
    audit::Action::new(&user, "org.price.delete", &format!("{}/{model}", org.name)).org(&org.name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// This month's spending against one budget.
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetUse {
    pub budget_usd: Option<f64>,
    pub spent_usd: f64,
    /// Of the budget (absent without one).
    pub percent: Option<f64>,
    pub exhausted: bool,
}

impl BudgetUse {
    fn of(spent: f64, budget: Option<f64>) -> Self {
        let round = |v: f64| (v * 1e4).round() / 1e4;
        Self {
            budget_usd: budget,
            spent_usd: round(spent),
            percent: budget.map(|b| if b > 0.0 { round(spent * 100.0 / b) } else { 100.0 }),
            exhausted: budget.is_some_and(|b| spent >= b),
        }
    }
}

/// A member's spending (owners and admins see every member's).
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberUse {
    pub user: String,
    #[serde(flatten)]
    pub usage: BudgetUse,
}

/// The organization's budgets this month.
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetStatus {
    pub org: String,
    /// `YYYY-MM` (UTC).
    pub month: String,
    /// The organization's budget.
    pub org_budget: BudgetUse,
    /// Yours, under `member_monthly_budget_usd`.
    pub you: BudgetUse,
    /// Every member who spent this month (owners and admins only; empty for members).
    pub members: Vec<MemberUse>,
}

/// What the organization spent this month against its budgets (any member).
#[utoipa::path(get, path = "/orgs/{org}/budget", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = BudgetStatus), Refusals))]
pub async fn status(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<BudgetStatus>, ApiError> {
    let (_, org, role) = load(&state, &user, &name)?;
    let month = budget_month(halyard_platform::now_ms());
    let (spend, _) = user_store::load::<OrgSpend>(&state, &subjects::org_spend_key(&org.name, &month)).await?;
    let s = &org.settings;
    let members = if role.manages() {
        spend.members.iter().map(|(u, v)| MemberUse { user: u.0.clone(), usage: BudgetUse::of(*v, s.member_monthly_budget_usd) }).collect()
    } else {
        Vec::new()
    };
    Ok(Json(BudgetStatus {
        org: org.name.clone(),
        month,
        org_budget: BudgetUse::of(spend.total_usd, s.monthly_budget_usd),
        you: BudgetUse::of(spend.of(&user), s.member_monthly_budget_usd),
        members,
    }))
}

/// Copies the organization's budgets where the agent runner reads them.
pub async fn mirror_budget(state: &AppState, org: &Org) -> Result<(), ApiError> {
    let budget = org.settings.budget();
    user_store::modify(state, &subjects::org_budget_key(&org.name), |b: &mut OrgBudget| {
        *b = budget.clone();
        Ok(())
    })
    .await
}

/// Copies the organization's outbound policy where the conversation manager reads it.
pub async fn mirror_egress(state: &AppState, org: &Org) -> Result<(), ApiError> {
    let policy = org.settings.egress.clone().unwrap_or_default();
    user_store::modify(state, &subjects::org_egress_key(&org.name), |p: &mut halyard_protocol::egress::EgressPolicy| {
        *p = policy.clone();
        Ok(())
    })
    .await
}

/// Copies `org`'s members where the agent runner and the conversation manager read them (they
/// do not follow the accounts bucket): called on every change of membership.
pub async fn mirror_members(state: &AppState, org: &Org) -> Result<(), ApiError> {
    let members: std::collections::BTreeSet<UserId> = org.members.keys().cloned().collect();
    user_store::modify(state, &subjects::org_members_key(&org.name), |m: &mut halyard_protocol::org::OrgMembers| {
        m.members = members.clone();
        Ok(())
    })
    .await
}

/// 402 `budget_exhausted` when a budget of `org` that covers `user` is spent this month.
pub async fn check_start(state: &AppState, org: &Org, user: &UserId) -> Result<(), ApiError> {
    let budget = org.settings.budget();
    if budget == OrgBudget::default() {
        return Ok(());
    }
    let month = budget_month(halyard_platform::now_ms());
    let (spend, _) = user_store::load::<OrgSpend>(state, &subjects::org_spend_key(&org.name, &month)).await?;
    match spend.exhausted(user, &budget) {
        Some(e) => Err(ApiError::new(StatusCode::PAYMENT_REQUIRED, "budget_exhausted", e.message(&org.name))),
        None => Ok(()),
    }
}
