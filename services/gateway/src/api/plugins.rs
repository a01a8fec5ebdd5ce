//! `/plugins/{scope}`: the marketplaces and plugins of one scope: `me` (the caller's own),
//! `@<org>` (an organization's: its members read, its owners and admins change) or `deployment`
//! (everyone reads, administrators change). The rules are [`crate::domain::plugins`]'; a
//! conversation gets what [`halyard_protocol::plugin::resolve`] makes of the three scopes when
//! it starts.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::plugin::{Marketplace, PluginAdds, PluginOffer, PluginPolicy, PluginSet, PluginSource, PluginUse, Scope, plugin_id};
use halyard_protocol::subjects;

use crate::audit::{self, Client};
use crate::auth::access::{forbidden, load, load_managed};
use crate::domain::plugins::{self as domain, MAX_MARKETPLACES};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;
use crate::state::registry::Principal;

const MANAGERS: &str = "only the organization's owners and admins change its plugins";

/// The scope a path names, checked for what the caller may do in it.
fn scope_of(state: &AppState, who: &Principal, raw: &str, write: bool) -> Result<Scope, ApiError> {
    match raw {
        "me" => Ok(Scope::User(who.user.clone())),
        "deployment" if write && !who.admin => Err(forbidden("only administrators change the deployment's plugins")),
        "deployment" => Ok(Scope::Deployment),
        _ => {
            let Some(org) = raw.strip_prefix('@') else {
                return Err(ApiError::bad_request(
                    "invalid_scope",
                    format!("`{raw}` is no scope: use `me`, `deployment` or `@<organization>`"),
                ));
            };
            let (_, o) =
                if write { load_managed(state, &who.user, org, MANAGERS)? } else { load(state, &who.user, org).map(|(r, o, _)| (r, o))? };
            Ok(Scope::Org(o.name))
        }
    }
}

fn org_of(scope: &Scope) -> Option<&str> {
    match scope {
        Scope::Org(o) => Some(o),
        _ => None,
    }
}

/// A marketplace as the Plugins page shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct MarketplaceView {
    pub name: String,
    pub source: PluginSource,
    pub commit: String,
    pub description: Option<String>,
    pub plugins: Vec<PluginOffer>,
    pub added_by: String,
    /// When it was last fetched (RFC 3339).
    pub fetched_at: String,
}

fn marketplace_view(name: &str, m: &Marketplace) -> MarketplaceView {
    MarketplaceView {
        name: name.to_owned(),
        source: m.source.clone(),
        commit: m.commit.clone(),
        description: m.description.clone(),
        plugins: m.plugins.clone(),
        added_by: m.added_by.clone(),
        fetched_at: halyard_protocol::rfc3339(m.fetched_ms),
    }
}

/// A newer version its marketplace offers (never applied without an upgrade).
#[derive(Debug, Serialize, ToSchema)]
pub struct UpdateView {
    pub version: Option<String>,
    pub commit: String,
    pub adds: PluginAdds,
}

/// A plugin a scope installed.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstalledView {
    /// `name@marketplace`.
    pub id: String,
    pub name: String,
    pub marketplace: String,
    pub version: Option<String>,
    pub commit: String,
    pub adds: PluginAdds,
    pub enabled: bool,
    pub policy: PluginPolicy,
    pub installed_by: String,
    pub updated_at: String,
    pub update: Option<UpdateView>,
}

/// One scope's marketplaces and plugins.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScopeView {
    pub scope: String,
    pub marketplaces: Vec<MarketplaceView>,
    pub installed: Vec<InstalledView>,
    /// Plugins of wider scopes this one turned off.
    pub disabled: Vec<String>,
    /// Plugins this scope's conversations never get.
    pub forbidden: Vec<String>,
    /// For `me`: what a conversation of the caller's gets now (in `?org=`, if given), in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective: Option<Vec<PluginUse>>,
}

/// An installed plugin of `set`, with the update its marketplace (of `visible`) offers.
fn installed_view(id: &str, set: &PluginSet, visible: &BTreeMap<String, Marketplace>) -> Option<InstalledView> {
    let p = set.installed.get(id)?;
    let update = visible
        .get(&p.marketplace)
        .and_then(|m| m.plugins.iter().find(|o| o.name == p.name && o.error.is_none() && o.at.bundle != p.at.bundle))
        .map(|o| UpdateView { version: o.at.version.clone(), commit: o.at.commit.clone(), adds: o.at.adds.clone() });
    Some(InstalledView {
        id: id.to_owned(),
        name: p.name.clone(),
        marketplace: p.marketplace.clone(),
        version: p.at.version.clone(),
        commit: p.at.commit.clone(),
        adds: p.at.adds.clone(),
        enabled: p.enabled,
        policy: p.policy,
        installed_by: p.installed_by.clone(),
        updated_at: halyard_protocol::rfc3339(p.updated_ms),
        update,
    })
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct ScopeQuery {
    /// For `me`: the organization whose conversations `effective` is for.
    pub org: Option<String>,
}

/// One scope's marketplaces (with what each plugin would add) and installed plugins (with
/// updates their marketplaces offer).
#[utoipa::path(get, path = "/plugins/{scope}", tag = "plugins", params(("scope" = String, Path), ScopeQuery),
    responses((status = 200, body = ScopeView), Refusals))]
pub async fn show(
    State(state): State<AppState>,
    who: Principal,
    Path(raw): Path<String>,
    Query(q): Query<ScopeQuery>,
) -> Result<Json<ScopeView>, ApiError> {
    let scope = scope_of(&state, &who, &raw, false)?;
    let set = domain::load(&state, &scope).await?;
    let visible = domain::visible(&state, &scope, &who.user, &set).await?;
    let installed = set.installed.keys().filter_map(|id| installed_view(id, &set, &visible)).collect();
    let effective = match (&scope, q.org) {
        (Scope::User(_), org) => {
            let org = match org {
                Some(o) => Some(load(&state, &who.user, &o)?.1.name),
                None => None,
            };
            let deployment = domain::load(&state, &Scope::Deployment).await?;
            let org_set = match &org {
                Some(o) => Some(domain::load(&state, &Scope::Org(o.clone())).await?),
                None => None,
            };
            Some(halyard_protocol::plugin::resolve(&deployment, org_set.as_ref(), &set))
        }
        _ => None,
    };
    Ok(Json(ScopeView {
        scope: if matches!(scope, Scope::User(_)) { "me".into() } else { scope.label() },
        marketplaces: set.marketplaces.iter().map(|(n, m)| marketplace_view(n, m)).collect(),
        installed,
        disabled: set.disabled.iter().cloned().collect(),
        forbidden: set.forbidden.iter().cloned().collect(),
        effective,
    }))
}

/// A marketplace to add: a git repository with `.claude-plugin/marketplace.json`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMarketplace {
    /// Its clone URL (`https://…`); a private one is fetched with your (or the
    /// organization's) git provider for its host.
    pub url: String,
    /// The branch or tag to follow (absent: the default branch).
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
}

/// Adds a marketplace: fetched now, every plugin it lists read (what each would add is shown
/// before anything is installed).
#[utoipa::path(post, path = "/plugins/{scope}/marketplaces", tag = "plugins", params(("scope" = String, Path)),
    request_body = AddMarketplace, responses((status = 201, body = MarketplaceView), Refusals, BodyRefusals, Conflict))]
pub async fn add_marketplace(
    State(state): State<AppState>,
    who: Principal,
    client: Client,
    Path(raw): Path<String>,
    ApiJson(body): ApiJson<AddMarketplace>,
) -> Result<(StatusCode, Json<MarketplaceView>), ApiError> {
    let scope = scope_of(&state, &who, &raw, true)?;
    crate::http::error::check_destination("url", &body.url, &state.config.gateway.git_api_allow, "HALYARD_GIT_API_ALLOW")?;
    let source = PluginSource { url: body.url.clone(), path: String::new(), git_ref: body.git_ref.clone().filter(|r| !r.is_empty()) };
    let (name, record) = domain::read_marketplace(&state, (&who.user, org_of(&scope)), &source, None).await?;
    let view = marketplace_view(&name, &record);
    user_store::modify(&state, &subjects::plugins_key(&scope), |set: &mut PluginSet| {
        if set.marketplaces.contains_key(&name) {
            return Err(ApiError::conflict(
                "marketplace_exists",
                format!("a marketplace named `{name}` is added already; refresh it or remove it first"),
            ));
        }
        if set.marketplaces.len() >= MAX_MARKETPLACES {
            return Err(ApiError::conflict(
                "too_many_marketplaces",
                format!("{MAX_MARKETPLACES} marketplaces are added already; remove one first"),
            ));
        }
        set.marketplaces.insert(name.clone(), record.clone());
        Ok(())
    })
    .await?;
    audited(&state, client, (&who, &scope), "plugin.marketplace.add", &name, serde_json::json!({"url": body.url, "commit": record.commit}))
        .await;
    Ok((StatusCode::CREATED, Json(view)))
}

/// Fetches a marketplace again: its plugins' newest versions are offered as updates, never
/// applied.
#[utoipa::path(post, path = "/plugins/{scope}/marketplaces/{name}/refresh", tag = "plugins", params(("scope" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = MarketplaceView), Refusals, Conflict))]
pub async fn refresh_marketplace(
    State(state): State<AppState>,
    who: Principal,
    client: Client,
    Path((raw, name)): Path<(String, String)>,
) -> Result<Json<MarketplaceView>, ApiError> {
    let scope = scope_of(&state, &who, &raw, true)?;
    let set = domain::load(&state, &scope).await?;
    let old = set.marketplaces.get(&name).ok_or_else(|| ApiError::not_found("marketplace"))?;
    let (fetched_name, record) = domain::read_marketplace(&state, (&who.user, org_of(&scope)), &old.source, Some(old)).await?;
    if fetched_name != name {
        return Err(ApiError::conflict(
            "marketplace_renamed",
            format!("the repository now names its marketplace `{fetched_name}`; remove `{name}` and add it again"),
        ));
    }
    let view = marketplace_view(&name, &record);
    user_store::modify(&state, &subjects::plugins_key(&scope), |set: &mut PluginSet| {
        let slot = set.marketplaces.get_mut(&name).ok_or_else(|| ApiError::not_found("marketplace"))?;
        *slot = record.clone();
        Ok(())
    })
    .await?;
    audited(&state, client, (&who, &scope), "plugin.marketplace.refresh", &name, serde_json::json!({"commit": record.commit})).await;
    Ok(Json(view))
}

/// Removes a marketplace; the plugins installed from it stay, at their versions.
#[utoipa::path(delete, path = "/plugins/{scope}/marketplaces/{name}", tag = "plugins", params(("scope" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "removed"), Refusals, Conflict))]
pub async fn remove_marketplace(
    State(state): State<AppState>,
    who: Principal,
    client: Client,
    Path((raw, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let scope = scope_of(&state, &who, &raw, true)?;
    user_store::modify(&state, &subjects::plugins_key(&scope), |set: &mut PluginSet| {
        set.marketplaces.remove(&name).map(drop).ok_or_else(|| ApiError::not_found("marketplace"))
    })
    .await?;
    audited(&state, client, (&who, &scope), "plugin.marketplace.remove", &name, serde_json::Value::Null).await;
    Ok(StatusCode::NO_CONTENT)
}

/// A plugin to install.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Install {
    /// `name@marketplace`.
    pub plugin: String,
    /// For an organization or the deployment: `required` keeps it on for everyone.
    #[serde(default)]
    pub policy: PluginPolicy,
}

fn split_id(id: &str) -> Result<(&str, &str), ApiError> {
    id.split_once('@')
        .filter(|(n, m)| !n.is_empty() && !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("invalid_field", format!("`{id}` is no plugin: name one as `name@marketplace`")))
}

/// Installs a plugin at the version its marketplace offers now; its conversations get it from
/// their start on.
#[utoipa::path(post, path = "/plugins/{scope}/installed", tag = "plugins", params(("scope" = String, Path)),
    request_body = Install, responses((status = 201, body = InstalledView), Refusals, BodyRefusals, Conflict))]
pub async fn install(
    State(state): State<AppState>,
    who: Principal,
    client: Client,
    Path(raw): Path<String>,
    ApiJson(body): ApiJson<Install>,
) -> Result<(StatusCode, Json<InstalledView>), ApiError> {
    let scope = scope_of(&state, &who, &raw, true)?;
    let (name, market) = split_id(&body.plugin)?;
    if body.policy == PluginPolicy::Required && matches!(scope, Scope::User(_)) {
        return Err(ApiError::bad_request("invalid_field", "`policy`: only an organization or the deployment requires a plugin"));
    }
    let visible = domain::visible(&state, &scope, &who.user, &domain::load(&state, &scope).await?).await?;
    let offer = domain::offered(domain::marketplace_in(&visible, market)?, market, name)?.clone();
    let id = plugin_id(name, market);
    let now = halyard_platform::now_ms();
    let set = user_store::modify(&state, &subjects::plugins_key(&scope), |set: &mut PluginSet| {
        if set.installed.contains_key(&id) {
            return Err(ApiError::conflict("plugin_installed", format!("`{id}` is installed already; upgrade it instead")));
        }
        if set.forbidden.contains(&id) {
            return Err(ApiError::conflict("plugin_forbidden", format!("`{id}` is forbidden here; allow it first")));
        }
        set.installed.insert(
            id.clone(),
            halyard_protocol::plugin::InstalledPlugin {
                marketplace: market.to_owned(),
                name: name.to_owned(),
                at: offer.at.clone(),
                enabled: true,
                policy: body.policy,
                installed_by: who.user.to_string(),
                installed_ms: now,
                updated_ms: now,
            },
        );
        Ok(set.clone())
    })
    .await?;
    let detail = serde_json::json!({"commit": offer.at.commit, "version": offer.at.version, "policy": body.policy, "adds": offer.at.adds});
    audited(&state, client, (&who, &scope), "plugin.install", &id, detail).await;
    let view = installed_view(&id, &set, &visible).ok_or_else(|| ApiError::internal("installed plugin vanished"))?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// A change of a plugin's state in a scope.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// On or off here: for a plugin this scope installed, its own switch; for one a wider scope
    /// installed, whether this scope turns it off (a required one cannot be).
    pub enabled: Option<bool>,
    /// For a plugin an organization or the deployment installed: `required` or `optional`.
    pub policy: Option<PluginPolicy>,
    /// For an organization or the deployment: its conversations never get it.
    pub forbidden: Option<bool>,
}

/// What a scope now says of one plugin.
#[derive(Debug, Serialize, ToSchema)]
pub struct PluginState {
    pub id: String,
    /// Installed here.
    pub installed: bool,
    pub enabled: bool,
    pub policy: Option<PluginPolicy>,
    pub forbidden: bool,
}

/// Turns a plugin on or off, requires or forbids it.
#[utoipa::path(patch, path = "/plugins/{scope}/installed/{id}", tag = "plugins", params(("scope" = String, Path), ("id" = String, Path)),
    request_body = Change, responses((status = 200, body = PluginState), Refusals, BodyRefusals, Conflict))]
pub async fn change(
    State(state): State<AppState>,
    who: Principal,
    client: Client,
    Path((raw, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<Change>,
) -> Result<Json<PluginState>, ApiError> {
    let scope = scope_of(&state, &who, &raw, true)?;
    split_id(&id)?;
    let personal = matches!(scope, Scope::User(_));
    if personal && (body.policy.is_some() || body.forbidden.is_some()) {
        return Err(ApiError::bad_request("invalid_field", "`policy` and `forbidden` are an organization's or the deployment's to set"));
    }
    if body.enabled == Some(false) {
        let required = domain::required_by(&state, &who.user).await?;
        let by = match &scope {
            Scope::User(_) => required.get(&id).cloned().unwrap_or_default(),
            Scope::Org(_) => required.get(&id).map(|v| v.iter().filter(|o| *o == "the deployment").cloned().collect()).unwrap_or_default(),
            Scope::Deployment => Vec::new(),
        };
        if !by.is_empty() {
            let message = format!("`{id}` is required by {}: it stays on in their conversations", by.join(", "));
            return Err(ApiError::conflict("plugin_required", message));
        }
    }
    let now = halyard_platform::now_ms();
    let out = user_store::modify(&state, &subjects::plugins_key(&scope), |set: &mut PluginSet| {
        if let Some(p) = set.installed.get_mut(&id) {
            if let Some(e) = body.enabled {
                p.enabled = e;
            }
            if let Some(policy) = body.policy {
                p.policy = policy;
            }
            p.updated_ms = now;
        } else {
            if body.policy.is_some() {
                return Err(ApiError::conflict(
                    "plugin_not_installed",
                    format!("`{id}` is not installed here: install it with that policy"),
                ));
            }
            match body.enabled {
                Some(false) => _ = set.disabled.insert(id.clone()),
                Some(true) => _ = set.disabled.remove(&id),
                None => {}
            }
        }
        match body.forbidden {
            Some(true) if set.installed.contains_key(&id) => {
                return Err(ApiError::conflict("plugin_installed", format!("`{id}` is installed here; remove it before forbidding it")));
            }
            Some(true) => _ = set.forbidden.insert(id.clone()),
            Some(false) => _ = set.forbidden.remove(&id),
            None => {}
        }
        let p = set.installed.get(&id);
        Ok(PluginState {
            id: id.clone(),
            installed: p.is_some(),
            enabled: p.map_or(!set.disabled.contains(&id), |p| p.enabled),
            policy: p.map(|p| p.policy),
            forbidden: set.forbidden.contains(&id),
        })
    })
    .await?;
    let detail = serde_json::json!({"enabled": body.enabled, "policy": body.policy, "forbidden": body.forbidden});
    audited(&state, client, (&who, &scope), "plugin.change", &id, detail).await;
    Ok(Json(out))
}

/// Upgrades a plugin to the version its marketplace offers now (refresh the marketplace to
/// see the newest).
#[utoipa::path(post, path = "/plugins/{scope}/installed/{id}/upgrade", tag = "plugins", params(("scope" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = InstalledView), Refusals, Conflict))]
pub async fn upgrade(
    State(state): State<AppState>,
    who: Principal,
    client: Client,
    Path((raw, id)): Path<(String, String)>,
) -> Result<Json<InstalledView>, ApiError> {
    let scope = scope_of(&state, &who, &raw, true)?;
    let (name, market) = split_id(&id)?;
    let visible = domain::visible(&state, &scope, &who.user, &domain::load(&state, &scope).await?).await?;
    let offer = domain::offered(domain::marketplace_in(&visible, market)?, market, name)?.clone();
    let (set, from) = user_store::modify(&state, &subjects::plugins_key(&scope), |set: &mut PluginSet| {
        let p = set.installed.get_mut(&id).ok_or_else(|| ApiError::not_found("installed plugin"))?;
        if p.at.bundle == offer.at.bundle {
            return Err(ApiError::conflict(
                "up_to_date",
                format!("`{id}` is at the version its marketplace offers; refresh the marketplace to look for a newer one"),
            ));
        }
        let from = std::mem::replace(&mut p.at, offer.at.clone());
        p.updated_ms = halyard_platform::now_ms();
        Ok((set.clone(), from))
    })
    .await?;
    let detail = serde_json::json!({"from": {"commit": from.commit, "version": from.version}, "to": {"commit": offer.at.commit, "version": offer.at.version}});
    audited(&state, client, (&who, &scope), "plugin.upgrade", &id, detail).await;
    let view = installed_view(&id, &set, &visible).ok_or_else(|| ApiError::internal("upgraded plugin vanished"))?;
    Ok(Json(view))
}

/// Removes an installed plugin (conversations that started with it keep it).
#[utoipa::path(delete, path = "/plugins/{scope}/installed/{id}", tag = "plugins", params(("scope" = String, Path), ("id" = String, Path)),
    responses((status = 204, description = "removed"), Refusals, Conflict))]
pub async fn uninstall(
    State(state): State<AppState>,
    who: Principal,
    client: Client,
    Path((raw, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let scope = scope_of(&state, &who, &raw, true)?;
    let gone = user_store::modify(&state, &subjects::plugins_key(&scope), |set: &mut PluginSet| {
        set.installed.remove(&id).ok_or_else(|| ApiError::not_found("installed plugin"))
    })
    .await?;
    audited(
        &state,
        client,
        (&who, &scope),
        "plugin.remove",
        &id,
        serde_json::json!({"commit": gone.at.commit, "version": gone.at.version}),
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}

/// Records a change of a scope's plugins in the audit trail.
async fn audited(
    state: &AppState,
    client: Client,
    (who, scope): (&Principal, &Scope),
    action: &str,
    target: &str,
    detail: serde_json::Value,
) {
    let target = format!("{}/{target}", scope.label());
    let mut a = audit::Action::new(&who.user, action, &target).detail(detail);
    if let Some(org) = org_of(scope) {
        a = a.org(org);
    }
    a.send(state, client).await;
}
