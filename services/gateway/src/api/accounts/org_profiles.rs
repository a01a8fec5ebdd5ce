//! What an organization offers its members' conversations: LLM profiles that its owners and
//! admins set up (`/orgs/{org}/llm-profiles/{name}`, the same bodies as a user's own; keys
//! sealed for the organization and never shown), and its settings (`/orgs/{org}/settings`: the
//! default profile, and whether members may use no other). Members see the profiles' names and
//! models and use them by starting a conversation with `"org"`; the conversation then names the
//! profile `@org/name` ([`halyard_protocol::user::org_profile`]).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::org::{Org, OrgSettings};
use halyard_protocol::user::{UserLlmProfiles, org_profile, org_slot_owner};
use halyard_protocol::{UserId, subjects};

use crate::api::settings::llm_profiles::{ProfileBody, ProfileList, ProfileView, profile_json, store_profile};
use crate::audit::{self, Client};
use crate::auth::access::{load, load_managed};
use crate::auth::{Recent, User};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;
use crate::state::registry::OrgWrite;

/// Owners and admins only.
fn manager(state: &AppState, user: &UserId, name: &str) -> Result<(u64, Org), ApiError> {
    load_managed(state, user, name, "only the organization's owners and admins change what it offers")
}

/// The organization's profiles.
pub async fn profiles(state: &AppState, org: &str) -> Result<UserLlmProfiles, ApiError> {
    Ok(user_store::load::<UserLlmProfiles>(state, &subjects::org_llm_key(org)).await?.0)
}

/// An organization's settings.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrgSettingsBody {
    /// One of the organization's LLM profiles: what its conversations use when they name none.
    #[serde(default)]
    pub default_llm_profile: Option<String>,
    /// Members' conversations in the organization may use no other profile.
    #[serde(default)]
    pub enforce_llm_profile: bool,
    /// Members sign in to the web app only through the identity provider (their API keys keep
    /// working for programs).
    #[serde(default)]
    pub require_sso: bool,
    /// Who signs in through the identity provider with an e-mail address at one of these
    /// domains joins as a member.
    #[serde(default)]
    pub sso_domains: Vec<String>,
    /// Who signs in with one of these in the `groups` claim joins as a member.
    #[serde(default)]
    pub sso_groups: Vec<String>,
    /// What the organization's conversations may spend on LLM calls in a month (UTC), in US
    /// dollars; at 80, 90 and 100 % a `budget_alert`, and at 100 % no further call.
    #[serde(default)]
    pub monthly_budget_usd: Option<f64>,
    /// The same, for each member's conversations in it.
    #[serde(default)]
    pub member_monthly_budget_usd: Option<f64>,
    /// `everyone` (default) or `admins`: who of its members may issue API keys of their own.
    #[serde(default)]
    pub key_issuers: halyard_protocol::org::KeyIssuers,
    /// `gvisor`: every conversation in the organization runs under gVisor (a start naming a
    /// spec of another runtime is refused; one naming none gets a gVisor spec).
    #[serde(default)]
    pub sandbox_runtime: Option<String>,
    /// What every sandbox of its conversations may reach by name (`{"allow": [...], "deny":
    /// [...], "mode": "read_only"}`), enforced over its members' environments: a name must be
    /// allowed by both, and either's deny wins. Container sandboxes.
    #[serde(default)]
    pub egress: Option<halyard_protocol::egress::EgressPolicy>,
}

fn settings_view(s: &OrgSettings) -> OrgSettingsBody {
    OrgSettingsBody {
        default_llm_profile: s.default_llm_profile.clone(),
        enforce_llm_profile: s.enforce_llm_profile,
        require_sso: s.require_sso,
        sso_domains: s.sso_domains.clone(),
        sso_groups: s.sso_groups.clone(),
        monthly_budget_usd: s.monthly_budget_usd,
        member_monthly_budget_usd: s.member_monthly_budget_usd,
        key_issuers: s.key_issuers,
        sandbox_runtime: s.sandbox_runtime.clone(),
        egress: s.egress.clone(),
    }
}

/// Checks the settings' single sign-on, budget and runtime fields.
fn check_settings(body: &OrgSettingsBody) -> Result<(), ApiError> {
    if let Some(p) = &body.egress {
        p.check("egress").map_err(|e| ApiError::bad_request("invalid_field", e))?;
    }
    if let Some(r) = body.sandbox_runtime.as_deref().filter(|r| !halyard_platform::config::RUNTIMES.contains(r)) {
        return Err(ApiError::bad_request("invalid_field", format!("`sandbox_runtime`: runc or gvisor, not {r:?}")));
    }
    for (field, v) in [("monthly_budget_usd", body.monthly_budget_usd), ("member_monthly_budget_usd", body.member_monthly_budget_usd)] {
        if v.is_some_and(|v| !v.is_finite() || !(0.0..=1e9).contains(&v)) {
            return Err(ApiError::bad_request("invalid_field", format!("`{field}`: US dollars, from 0 up")));
        }
    }
    let domain = |d: &String| {
        (1..=253).contains(&d.len())
            && d.contains('.')
            && d.split('.').all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
    };
    if body.sso_domains.len() > 50 || !body.sso_domains.iter().all(domain) {
        return Err(ApiError::bad_request("invalid_field", "`sso_domains`: up to 50 domain names in lower case, like example.com"));
    }
    if body.sso_groups.len() > 50 || body.sso_groups.iter().any(|g| g.is_empty() || g.len() > 256 || g.chars().any(char::is_control)) {
        return Err(ApiError::bad_request("invalid_field", "`sso_groups`: up to 50 group names, each 1 to 256 characters"));
    }
    if body.require_sso && !body.sso_domains.iter().chain(&body.sso_groups).any(|_| true) {
        return Err(ApiError::bad_request(
            "invalid_field",
            "`require_sso` needs `sso_domains` or `sso_groups`: the identity provider must know who the organization's members are",
        ));
    }
    Ok(())
}

/// Who may change the single sign-on settings: joining by e-mail domain or group reaches users
/// outside the organization (any organization could otherwise claim `gmail.com`), and
/// `require_sso` locks members out of the page, so these are a deployment administrator's to
/// set (403 `admin_only`); `require_sso` also needs single sign-on configured (400
/// `sso_not_configured`), or members could not sign in to the page at all.
fn check_sso_settings(
    state: &AppState,
    principal: &crate::state::registry::Principal,
    now: &OrgSettings,
    body: &OrgSettingsBody,
) -> Result<(), ApiError> {
    let changed = body.require_sso != now.require_sso || body.sso_domains != now.sso_domains || body.sso_groups != now.sso_groups;
    if changed && !principal.admin {
        return Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "admin_only",
            "`require_sso`, `sso_domains` and `sso_groups` reach beyond the organization: ask a deployment administrator to set them",
        ));
    }
    let g = &state.config.gateway;
    if body.require_sso && !now.require_sso && (g.oidc_issuer.is_empty() || g.oidc_client_id.is_empty()) {
        return Err(ApiError::bad_request(
            "sso_not_configured",
            "`require_sso`: this deployment has no single sign-on (HALYARD_OIDC_ISSUER), so members could not sign in to the page",
        ));
    }
    Ok(())
}

/// The organization's settings (any member).
#[utoipa::path(get, path = "/orgs/{org}/settings", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = OrgSettingsBody), Refusals))]
pub async fn get_settings(
    State(state): State<AppState>,
    User(user): User,
    Path(name): Path<String>,
) -> Result<Json<OrgSettingsBody>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    Ok(Json(settings_view(&org.settings)))
}

/// Replaces the organization's settings (owners and admins). An enforced profile needs a
/// default.
#[utoipa::path(put, path = "/orgs/{org}/settings", tag = "orgs", params(("org" = String, Path)), request_body = OrgSettingsBody,
    responses((status = 200, body = OrgSettingsBody), Refusals, BodyRefusals, Conflict))]
pub async fn put_settings(
    State(state): State<AppState>,
    principal: crate::state::registry::Principal,
    client: Client,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<OrgSettingsBody>,
) -> Result<Json<OrgSettingsBody>, ApiError> {
    let user = principal.user.clone();
    let (revision, mut org) = manager(&state, &user, &name)?;
    check_settings(&body)?;
    check_sso_settings(&state, &principal, &org.settings, &body)?;
    match &body.default_llm_profile {
        Some(p) if !profiles(&state, &org.name).await?.profiles.contains_key(p) => {
            return Err(ApiError::bad_request(
                "unknown_llm_profile",
                format!(
                    "`default_llm_profile`: the organization has no LLM profile {p:?} (see GET /api/v1/orgs/{}/llm-profiles)",
                    org.name
                ),
            ));
        }
        None if body.enforce_llm_profile => {
            return Err(ApiError::bad_request("invalid_field", "`enforce_llm_profile` needs a `default_llm_profile` to enforce"));
        }
        _ => {}
    }
    org.settings = OrgSettings {
        default_llm_profile: body.default_llm_profile.clone(),
        enforce_llm_profile: body.enforce_llm_profile,
        require_sso: body.require_sso,
        sso_domains: body.sso_domains.clone(),
        sso_groups: body.sso_groups.clone(),
        monthly_budget_usd: body.monthly_budget_usd,
        member_monthly_budget_usd: body.member_monthly_budget_usd,
        key_issuers: body.key_issuers,
        sandbox_runtime: body.sandbox_runtime.clone(),
        egress: body.egress.clone().filter(|p| !p.is_empty()),
    };
    org.updated_ms = halyard_platform::now_ms();
    state.accounts.save_org(org.clone(), Some(revision)).await.map_err(|e| match e {
        OrgWrite::Conflict => ApiError::conflict("concurrent_update", "the organization changed meanwhile; read it again and retry"),
        OrgWrite::Bus(e) => ApiError::unavailable(format!("the accounts store did not answer ({e}); try again")),
    })?;
    // The agent runner reads the budgets from the users' bucket (it does not follow accounts).
    crate::api::accounts::org_budgets::mirror_budget(&state, &org).await?;
    // The conversation manager reads the outbound policy there too.
    crate::api::accounts::org_budgets::mirror_egress(&state, &org).await?;
    let detail = serde_json::to_value(&body).unwrap_or_default();
    audit::Action::new(&user, "org.settings", &org.name).detail(detail).org(&org.name).send(&state, client).await;
    Ok(Json(settings_view(&org.settings)))
}

/// The organization's LLM profiles (any member; never their keys).
#[utoipa::path(get, path = "/orgs/{org}/llm-profiles", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = ProfileList), Refusals))]
pub async fn list_profiles(
    State(state): State<AppState>,
    User(user): User,
    Path(name): Path<String>,
) -> Result<Json<ProfileList>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    let default = org.settings.default_llm_profile.as_deref();
    let items = profiles(&state, &org.name).await?.profiles.iter().map(|(n, p)| profile_json(n, p, default == Some(n.as_str()))).collect();
    Ok(Json(ProfileList { items, operator_model: state.config.llm.model.clone() }))
}

/// Creates (201) or changes (200) an LLM profile of the organization (owners and admins).
#[utoipa::path(put, path = "/orgs/{org}/llm-profiles/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    request_body = ProfileBody, responses((status = 200, body = ProfileView), (status = 201, body = ProfileView), Refusals, BodyRefusals, Conflict))]
pub async fn put_profile(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path((name, profile)): Path<(String, String)>,
    ApiJson(body): ApiJson<ProfileBody>,
) -> Result<impl IntoResponse, ApiError> {
    let user = principal.user;
    let (_, org) = manager(&state, &user, &name)?;
    let key = subjects::org_llm_key(&org.name);
    let (created, mut view, provider) = store_profile(&state, &key, &org_slot_owner(&org.name), &profile, &body).await?;
    view.default = org.settings.default_llm_profile.as_deref() == Some(profile.as_str());
    let detail = serde_json::json!({"created": created, "provider": provider, "model": body.model, "key_changed": body.api_key.is_some()});
    audit::Action::new(&user, "org.llm_profile.put", &org_profile(&org.name, &profile))
        .detail(detail)
        .org(&org.name)
        .send(&state, client)
        .await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Deletes an LLM profile of the organization (owners and admins); not its default (409
/// `profile_in_use`).
#[utoipa::path(delete, path = "/orgs/{org}/llm-profiles/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete_profile(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((name, profile)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, org) = manager(&state, &user, &name)?;
    if org.settings.default_llm_profile.as_deref() == Some(profile.as_str()) {
        return Err(ApiError::conflict(
            "profile_in_use",
            format!("{profile:?} is the organization's default; choose another default first"),
        ));
    }
    let key = subjects::org_llm_key(&org.name);
    user_store::remove_named(&state, &key, |s: &mut UserLlmProfiles| &mut s.profiles, &profile, "LLM profile").await?;
    audit::Action::new(&user, "org.llm_profile.delete", &org_profile(&org.name, &profile)).org(&org.name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// The profile a conversation started by `user` in organization `name` uses, given the one it
/// asked for: the organization's default when it asks none (then the user's own default), the
/// organization's profile of that name, else the user's own; an enforced default allows no
/// other (403 `llm_profile_enforced`). `Ok(None)`: the caller decides (the user's settings).
pub async fn profile_for_start(state: &AppState, user: &UserId, name: &str, asked: Option<&str>) -> Result<Option<String>, ApiError> {
    let (_, org, _) = load(state, user, name)?;
    crate::api::accounts::org_budgets::check_start(state, &org, user).await?;
    let default = org.settings.default_llm_profile.as_deref();
    if org.settings.enforce_llm_profile
        && asked.is_some_and(|a| Some(a) != default && a != org_profile(&org.name, default.unwrap_or_default()))
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "llm_profile_enforced",
            format!("the organization `{}` has its conversations use its profile {:?} only", org.name, default.unwrap_or_default()),
        ));
    }
    let offered = profiles(state, &org.name).await?;
    // `@org/name` names the organization's profile too.
    let asked = asked.map(|a| halyard_protocol::user::parse_org_profile(a).filter(|(o, _)| *o == org.name).map_or(a, |(_, n)| n));
    Ok(match asked {
        None => default.map(|d| org_profile(&org.name, d)),
        Some(a) if offered.profiles.contains_key(a) => Some(org_profile(&org.name, a)),
        Some(a) => {
            crate::domain::user_config::check_profile(state, user, "llm_profile", a).await?;
            Some(a.to_owned())
        }
    })
}
