//! Who a single sign-on becomes: the user the provider's identity (`<issuer>#<sub>`) was made or
//! bound as before; else a user an administrator made first with this verified e-mail address,
//! bound to it now; else, when the deployment admits it (`HALYARD_OIDC_ALLOWED_DOMAINS` holds its
//! verified address's domain, or its `groups` claim holds `HALYARD_OIDC_REQUIRED_GROUP`), a new
//! user. Anyone else is refused: with a provider open to the world, strangers would otherwise
//! get sandboxes on the operator's LLM.
//!
//! A new user's name never belongs to anyone: not to an account, a bootstrap key, an issued key,
//! a name in `HALYARD_ADMINS`, or a name that owns data here (conversations, sandboxes, usage).
//! It comes from the e-mail address only when the provider verified that address; otherwise
//! from a digest of the identity, so an address like `root@anything` names nobody.
//!
//! Then the user is placed in the organizations whose `sso_domains` hold their verified
//! address's domain or whose `sso_groups` meet their `groups` claim (settings only deployment
//! administrators make), unless they left that organization themselves.

use halyard_platform::now_ms;
use halyard_protocol::UserId;
use halyard_protocol::accounts::UserAccount;
use halyard_protocol::org::Role;
use sha2::{Digest, Sha256};

use crate::api::accounts::oidc::OidcError as SsoError;
use crate::audit;
use crate::http::error::ApiError;
use crate::state::AppState;

/// Who the provider says signed in.
pub(crate) struct Identity {
    pub subject: String,
    pub email: Option<String>,
    pub email_verified: bool,
    pub name: Option<String>,
    pub groups: Vec<String>,
}

/// The user `id` signs in as; `Ok(Err(why))` when it may not sign in here.
pub(crate) async fn provision(state: &AppState, id: &Identity, ip: std::net::IpAddr) -> Result<Result<UserId, SsoError>, ApiError> {
    let store_err = |e: halyard_platform::BusError| {
        tracing::error!(error = %e, "cannot store a user made by single sign-on");
        ApiError::unavailable("the accounts store did not answer; try again")
    };
    let verified = id.email.as_deref().filter(|_| id.email_verified);
    let user = if let Some(a) = state.accounts.by_sso_subject(&id.subject) {
        a.user
    } else if let Some(mut a) = verified.and_then(|e| state.accounts.by_email_unbound(e)) {
        // Made by an administrator for this address: bound to the identity from now on.
        a.sso_subject = Some(id.subject.clone());
        a.updated_ms = now_ms();
        state.accounts.put_user(a.clone()).await.map_err(store_err)?;
        let detail = serde_json::json!({"via": "sso", "email": verified});
        audit::record(state, audit::Action::new(&a.user, "user.sso_bound", &a.user.0).detail(detail), Some(ip)).await;
        a.user
    } else {
        if let Err(why) = admitted(state, id) {
            return Ok(Err(why));
        }
        let name = free_name(state, id);
        let now = now_ms();
        let account = UserAccount {
            user: UserId(name.clone()),
            admin: false,
            disabled: false,
            created_ms: now,
            updated_ms: now,
            sso_subject: Some(id.subject.clone()),
            email: verified.map(str::to_owned),
        };
        state.accounts.put_user(account).await.map_err(store_err)?;
        let detail = serde_json::json!({"via": "sso", "email": id.email, "email_verified": id.email_verified, "name": id.name});
        audit::record(state, audit::Action::new(&UserId(name.clone()), "user.create", &name).detail(detail), Some(ip)).await;
        UserId(name)
    };
    let domain = verified.and_then(|e| e.rsplit_once('@')).map(|(_, d)| d.to_owned());
    for (_, org) in state.accounts.all_orgs() {
        let by_domain = domain.as_ref().is_some_and(|d| org.settings.sso_domains.iter().any(|s| s == d));
        let by_group = id.groups.iter().any(|g| org.settings.sso_groups.contains(g));
        if (by_domain || by_group) && org.role_of(&user).is_none() && !org.left.contains(&user) {
            join(state, &org.name, &user, ip, if by_domain { "domain" } else { "group" }).await;
        }
    }
    Ok(Ok(user))
}

/// Whether the deployment takes `id` as a new user.
fn admitted(state: &AppState, id: &Identity) -> Result<(), SsoError> {
    let g = &state.config.gateway;
    let domain = id.email.as_deref().filter(|_| id.email_verified).and_then(|e| e.rsplit_once('@')).map(|(_, d)| d);
    let by_domain = domain.is_some_and(|d| g.oidc_allowed_domains.iter().any(|a| a == d));
    let by_group = !g.oidc_required_group.is_empty() && id.groups.contains(&g.oidc_required_group);
    if by_domain || by_group {
        return Ok(());
    }
    let why = if g.oidc_allowed_domains.is_empty() && g.oidc_required_group.is_empty() {
        "this deployment signs in only the users an administrator added; ask one to add you with your e-mail address".to_owned()
    } else if id.email.is_some() && !id.email_verified {
        "your identity provider has not verified your e-mail address, and this deployment admits people by it; verify it there, or ask an administrator to add you".to_owned()
    } else {
        "your e-mail domain or groups are not among those this deployment admits; ask an administrator to add you".to_owned()
    };
    Err(SsoError(why))
}

/// Whether `name` belongs to anyone or anything here already.
fn taken(state: &AppState, name: &str) -> bool {
    state.accounts.exists(name)
        || state.accounts.is_bootstrap_admin(name)
        || !state.accounts.keys_of(name).is_empty()
        || state.store.owns_anything(name).unwrap_or(true)
}

/// A user name for a new identity: the verified e-mail address's local part, else a digest of the
/// identity, in the letters user names take, made unique with a number.
fn free_name(state: &AppState, id: &Identity) -> String {
    let base = match id.email.as_deref().filter(|_| id.email_verified).and_then(|e| e.split('@').next()) {
        Some(local) => {
            let base: String = local
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c.to_ascii_lowercase() } else { '-' })
                .take(48)
                .collect();
            if base.trim_matches('-').is_empty() { "user".to_owned() } else { base }
        }
        None => {
            let digest = Sha256::digest(id.subject.as_bytes());
            format!("sso-{}", digest.iter().take(5).map(|b| format!("{b:02x}")).collect::<String>())
        }
    };
    let mut name = base.clone();
    let mut n = 2;
    while taken(state, &name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

/// Adds `user` to `org` as a member (again from a fresh read if it changed meanwhile).
async fn join(state: &AppState, org: &str, user: &UserId, ip: std::net::IpAddr, by: &str) {
    for _ in 0..3 {
        let Some((revision, mut o)) = state.accounts.org(org) else { return };
        if o.role_of(user).is_some() {
            return;
        }
        o.members.insert(user.clone(), Role::Member);
        o.updated_ms = now_ms();
        if state.accounts.save_org(o.clone(), Some(revision)).await.is_ok() {
            if let Err(e) = crate::api::accounts::org_budgets::mirror_members(state, &o).await {
                tracing::warn!(org, error = ?e, "the organization's members could not be copied for the agent runner");
            }
            let target = format!("{org}/{user}");
            let a = audit::Action::new(user, "org.member_add", &target)
                .detail(serde_json::json!({"via": "sso", "by": by, "role": "member"}))
                .org(org);
            audit::record(state, a, Some(ip)).await;
            return;
        }
    }
    tracing::warn!(org, user = %user, "could not add a single sign-on user to an organization; the next sign-in tries again");
}
