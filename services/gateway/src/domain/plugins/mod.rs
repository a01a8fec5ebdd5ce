//! Plugin marketplaces and installed plugins: the rules behind `/plugins`. A marketplace is
//! fetched (through [`fetch`]) at its branch's newest commit; each plugin it lists is read then
//! and kept as a content-addressed bundle, so the Plugins page shows what a plugin would add
//! before anyone installs it, and an install or upgrade only records which bundle a scope uses.
//! A refresh fetches again and offers, never applies, what changed.
//!
//! Which marketplaces a scope may install from: its own, and those of every wider scope it sees
//! (a user: their organizations' and the deployment's; an organization: the deployment's).

pub mod fetch;

use std::collections::BTreeMap;

use halyard_platform::plugins::{Components, ListedSource, MARKETPLACE_FILE, ROOT_VAR, bundle_sha256, parse_marketplace};
use halyard_protocol::UserId;
use halyard_protocol::plugin::{Marketplace, PluginBundle, PluginOffer, PluginSet, PluginSource, PluginVersion, Scope};
use halyard_protocol::subjects;

use crate::domain::user_store;
use crate::http::error::ApiError;
use crate::state::AppState;

/// 404 in its own words (`ApiError::not_found` says only what is missing).
fn missing(message: String) -> ApiError {
    ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", message)
}

/// Largest bundle kept for one plugin (the user bucket's entries are NATS messages).
const MAX_BUNDLE_BYTES: usize = 768 * 1024;
/// Marketplaces one scope may add.
pub const MAX_MARKETPLACES: usize = 50;

/// The git provider token that reaches `url` for `who` (their own, else their organization's).
async fn authorization(state: &AppState, who: &UserId, org: Option<&str>, url: &str) -> Result<Option<String>, ApiError> {
    let remote = halyard_platform::git_proxy::remote_for(&state.user_kv, &state.vault, who, org, url)
        .await
        .map_err(|e| ApiError::bad_request("git_provider_unreadable", e))?;
    Ok(remote.map(|r| r.authorization().to_owned()))
}

async fn fetch_as(state: &AppState, who: &UserId, org: Option<&str>, url: &str, git_ref: Option<&str>) -> Result<fetch::Fetched, ApiError> {
    let auth = authorization(state, who, org, url).await?;
    fetch::fetch(url, git_ref, auth.as_deref(), &state.config.gateway.git_api_allow)
        .await
        .map_err(|e| ApiError::bad_request("fetch_failed", e.0))
}

/// The bundle of the folder `path` of a fetched tree.
fn bundle_of(fetched: &fetch::Fetched, path: &str, name: &str) -> Result<PluginBundle, String> {
    let prefix = if path.is_empty() { String::new() } else { format!("{path}/") };
    let mut bundle = PluginBundle { name: name.to_owned(), commit: fetched.commit.clone(), ..Default::default() };
    let mut bytes = 0;
    for (file, (text, executable)) in &fetched.files {
        let Some(rel) = file.strip_prefix(&prefix) else { continue };
        bytes += rel.len() + text.len();
        if bytes > MAX_BUNDLE_BYTES {
            return Err(format!("its files pass {} KiB of text; Halyard keeps plugins up to that", MAX_BUNDLE_BYTES >> 10));
        }
        if *executable {
            bundle.executable.insert(rel.to_owned());
        }
        bundle.files.insert(rel.to_owned(), text.clone());
    }
    if bundle.files.is_empty() {
        return Err(format!("`{path}` holds no files at {}", fetched.commit));
    }
    Ok(bundle)
}

/// Stores a bundle under its SHA-256 (once: the same content is the same key).
async fn keep(state: &AppState, bundle: &PluginBundle) -> Result<String, ApiError> {
    let sha = bundle_sha256(bundle);
    let key = subjects::plugin_bundle_key(&sha);
    if state.user_kv.get(&key).await.ok().flatten().is_none() {
        let bytes = serde_json::to_vec(bundle).map_err(ApiError::internal)?;
        state.user_kv.put(&key, bytes.into()).await.map_err(|e| ApiError::unavailable(format!("the plugin could not be kept: {e}")))?;
    }
    Ok(sha)
}

/// One listed plugin read and kept: its offer (with `error` when it cannot be installed).
async fn offer(
    state: &AppState,
    (who, org): (&UserId, Option<&str>),
    listed: &halyard_platform::plugins::Listed,
    here: (&fetch::Fetched, &PluginSource),
) -> Result<PluginOffer, ApiError> {
    let (fetched_here, marketplace) = here;
    let (source, fetched) = match &listed.source {
        ListedSource::Here(path) => (PluginSource { path: path.clone(), ..marketplace.clone() }, None),
        ListedSource::Repository { url, git_ref, path } => {
            let source = PluginSource { url: url.clone(), path: path.clone(), git_ref: git_ref.clone() };
            (source, Some(fetch_as(state, who, org, url, git_ref.as_deref()).await))
        }
    };
    let mut offer = PluginOffer {
        name: listed.name.clone(),
        description: listed.description.clone(),
        at: PluginVersion {
            version: listed.version.clone(),
            source: source.clone(),
            commit: fetched_here.commit.clone(),
            bundle: String::new(),
            adds: Default::default(),
        },
        error: None,
    };
    let tree = match &fetched {
        None => fetched_here,
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            offer.error = Some(e.message.clone());
            return Ok(offer);
        }
    };
    offer.at.commit = tree.commit.clone();
    let read = bundle_of(tree, &source.path, &listed.name).and_then(|b| Components::read(&b, ROOT_VAR).map(|c| (b, c)));
    match read {
        Ok((bundle, components)) => {
            offer.at.adds = components.adds();
            offer.at.version = offer.at.version.or_else(|| manifest_version(&bundle));
            offer.at.bundle = keep(state, &bundle).await?;
        }
        Err(e) => offer.error = Some(e),
    }
    Ok(offer)
}

fn manifest_version(bundle: &PluginBundle) -> Option<String> {
    let text = bundle.files.get(halyard_platform::plugins::MANIFEST_FILE)?;
    serde_json::from_str::<serde_json::Value>(text).ok()?.get("version")?.as_str().map(str::to_owned)
}

/// Fetches a marketplace and reads every plugin it lists: its name and record.
pub async fn read_marketplace(
    state: &AppState,
    (who, org): (&UserId, Option<&str>),
    source: &PluginSource,
    added: Option<&Marketplace>,
) -> Result<(String, Marketplace), ApiError> {
    let fetched = fetch_as(state, who, org, &source.url, source.git_ref.as_deref()).await?;
    let Some((text, _)) = fetched.files.get(MARKETPLACE_FILE) else {
        return Err(ApiError::bad_request(
            "not_a_marketplace",
            format!("{} has no {MARKETPLACE_FILE} at {}: a marketplace lists its plugins there", source.url, fetched.commit),
        ));
    };
    let file = parse_marketplace(text).map_err(|e| ApiError::bad_request("not_a_marketplace", e))?;
    let mut plugins = Vec::new();
    for listed in &file.plugins {
        plugins.push(offer(state, (who, org), listed, (&fetched, source)).await?);
    }
    let now = halyard_platform::now_ms();
    let record = Marketplace {
        source: source.clone(),
        commit: fetched.commit.clone(),
        description: file.description,
        plugins,
        added_by: added.map_or_else(|| who.to_string(), |a| a.added_by.clone()),
        added_ms: added.map_or(now, |a| a.added_ms),
        fetched_ms: now,
    };
    Ok((file.name, record))
}

/// The scope's stored set.
pub async fn load(state: &AppState, scope: &Scope) -> Result<PluginSet, ApiError> {
    Ok(user_store::load::<PluginSet>(state, &subjects::plugins_key(scope)).await?.0)
}

/// The scopes wider than `scope` that `user` sees, widest first.
pub fn wider(state: &AppState, scope: &Scope, user: &UserId) -> Vec<Scope> {
    match scope {
        Scope::Deployment => Vec::new(),
        Scope::Org(_) => vec![Scope::Deployment],
        Scope::User(_) => {
            std::iter::once(Scope::Deployment).chain(state.accounts.orgs_of(user).into_iter().map(|o| Scope::Org(o.name))).collect()
        }
    }
}

/// The marketplaces an install at `scope` may use, by name: the scope's own (`own`, its set as
/// read) over those of the wider scopes it sees.
pub async fn visible(state: &AppState, scope: &Scope, user: &UserId, own: &PluginSet) -> Result<BTreeMap<String, Marketplace>, ApiError> {
    let mut out = BTreeMap::new();
    // Widest first, so that a narrower scope's marketplace of the same name is the one kept.
    for wider in wider(state, scope, user) {
        out.extend(load(state, &wider).await?.marketplaces);
    }
    out.extend(own.marketplaces.clone());
    Ok(out)
}

/// The marketplace `name` of those [`visible`]; 404 when there is none.
pub fn marketplace_in<'a>(visible: &'a BTreeMap<String, Marketplace>, name: &str) -> Result<&'a Marketplace, ApiError> {
    visible.get(name).ok_or_else(|| {
        missing(format!("no marketplace `{name}` is added here or for you; add it first (POST /plugins/{{scope}}/marketplaces)"))
    })
}

/// The offer `plugin` of a marketplace, installable.
pub fn offered<'a>(m: &'a Marketplace, marketplace: &str, plugin: &str) -> Result<&'a PluginOffer, ApiError> {
    let o = m
        .plugins
        .iter()
        .find(|p| p.name == plugin)
        .ok_or_else(|| missing(format!("marketplace `{marketplace}` lists no plugin `{plugin}`")))?;
    if let Some(e) = &o.error {
        return Err(ApiError::conflict("plugin_unusable", format!("`{plugin}` cannot be installed: {e}")));
    }
    Ok(o)
}

/// For each plugin id, which organizations `user` is in require it.
pub async fn required_by(state: &AppState, user: &UserId) -> Result<BTreeMap<String, Vec<String>>, ApiError> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for org in state.accounts.orgs_of(user) {
        let set = load(state, &Scope::Org(org.name.clone())).await?;
        for (id, p) in set.installed {
            if p.policy == halyard_protocol::plugin::PluginPolicy::Required {
                out.entry(id).or_default().push(org.name.clone());
            }
        }
    }
    let deployment = load(state, &Scope::Deployment).await?;
    for (id, p) in deployment.installed {
        if p.policy == halyard_protocol::plugin::PluginPolicy::Required {
            out.entry(id).or_default().push("the deployment".into());
        }
    }
    Ok(out)
}
