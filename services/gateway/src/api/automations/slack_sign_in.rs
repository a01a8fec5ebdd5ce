//! "Sign in with Slack" for a Slack sign-in link: the proof that whoever links a Slack user to
//! their Halyard account is that Slack user, from Slack itself (OpenID Connect against Slack with
//! the operator's own Slack app: `HALYARD_SLACK_OIDC_CLIENT_ID` and `HALYARD_SLACK_OIDC_CLIENT_SECRET`),
//! not from the automation's owner, who holds the signing secret and the app that names users on
//! the link page.
//!
//! `GET /auth/slack/start?link=<code>&run_as_me=` (signed in with a full key: a GET that links, so
//! not with a read-only one) sends the browser to Slack with a
//! fresh state, nonce and PKCE challenge, kept with who is linking and what in a short-lived
//! signed cookie (`halyard_slack`); `GET /auth/slack/callback` checks Slack's ID token as single
//! sign-on does, then requires its `https://slack.com/user_id` (and `team_id`, when the link
//! knows its workspace) to be the link's, and the key the start was made with to be still good
//! (not revoked, its user not disabled), and only then links (the code is used up then). Either
//! way the browser goes back to the link's page, with `?linked=` or `?slack_error=`.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use halyard_platform::{net::percent_encode, now_ms};
use halyard_protocol::UserId;
use halyard_protocol::accounts::KeyScope;

use crate::api::accounts::oidc::{self, CallbackQuery, Kept, OidcError, Provider, found};
use crate::audit::{self, Client};
use crate::auth::Acting;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::state::AppState;

const STATE_COOKIE: &str = "halyard_slack";
const COOKIE_PATH: &str = "/api/v1/auth/slack";
/// How long a sign-in may take at Slack.
const STATE_SECS: i64 = 600;
/// The claims Slack's ID token names the user and workspace with.
const USER_CLAIM: &str = "https://slack.com/user_id";
const TEAM_CLAIM: &str = "https://slack.com/team_id";

fn provider(state: &AppState) -> Provider<'_> {
    let g = &state.config.gateway;
    Provider {
        issuer: &g.slack_oidc_issuer,
        client_id: &g.slack_oidc_client_id,
        client_secret: &g.slack_oidc_client_secret,
        callback: "/auth/slack/callback",
    }
}

/// What a sign-in keeps between its start and its callback.
#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    state: String,
    nonce: String,
    verifier: String,
    user: UserId,
    /// What they signed in to Halyard with, checked again at the callback: a key revoked or a
    /// user disabled meanwhile links nobody.
    #[serde(default)]
    credential: String,
    code: String,
    run_as_me: bool,
    at_ms: i64,
}

impl Kept for Pending {
    fn state(&self) -> &str {
        &self.state
    }
    fn at_ms(&self) -> i64 {
        self.at_ms
    }
}

fn state_cookie(headers: &HeaderMap, value: &str, max_age: i64) -> Result<HeaderValue, ApiError> {
    oidc::state_cookie(headers, STATE_COOKIE, COOKIE_PATH, value, max_age)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StartQuery {
    /// The sign-in link's code.
    pub link: String,
    /// Let the automation run agents as you once linked.
    #[serde(default)]
    pub run_as_me: bool,
}

/// Sends the browser to Slack (303) to prove who you are there, and come back to
/// `/auth/slack/callback`; 404 `slack_sign_in_not_configured` without it.
#[utoipa::path(get, path = "/auth/slack/start", tag = "automations", params(StartQuery),
    responses((status = 303, description = "to Slack"), Refusals))]
pub async fn start(
    State(state): State<AppState>,
    Acting(principal): Acting,
    headers: HeaderMap,
    query: Result<Query<StartQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let user = principal.user;
    if !super::slack_links::configured(&state) {
        return Err(not_configured());
    }
    // A link that no longer works says so here, before Slack is asked.
    super::slack_links::code_of(&state, &q.link).await?;
    let started = oidc::start(&state, &provider(&state), &[]).await.map_err(|e| ApiError::unavailable(e.0))?;
    let pending = Pending {
        state: started.state,
        nonce: started.nonce,
        verifier: started.verifier,
        user,
        credential: principal.credential,
        code: q.link,
        run_as_me: q.run_as_me,
        at_ms: now_ms(),
    };
    let cookie = state_cookie(&headers, &oidc::seal(&state, "slack-state", &pending), STATE_SECS)?;
    Ok(found(&started.url, vec![cookie]))
}

fn not_configured() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "slack_sign_in_not_configured",
        "this deployment has no Sign in with Slack (HALYARD_SLACK_OIDC_CLIENT_ID, HALYARD_SLACK_OIDC_CLIENT_SECRET)",
    )
}

/// Slack's answer (303): the link made and its page saying so, or its page saying why not.
#[utoipa::path(get, path = "/auth/slack/callback", tag = "automations", security(()), params(CallbackQuery),
    responses((status = 303, description = "to the link's page, linked or saying why not"), Refusals))]
pub async fn callback(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    query: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    if !super::slack_links::configured(&state) {
        return Err(not_configured());
    }
    let clear = state_cookie(&headers, "", 0)?;
    let Some(p) = oidc::returning::<Pending>(&state, &headers, STATE_COOKIE, "slack-state", STATE_SECS, &q) else {
        tracing::info!("a Slack sign-in callback without this browser's state");
        let to = format!("/?slack_error={}", percent_encode("this Slack sign-in expired or was not started here; follow the link again"));
        return Ok(found(&to, vec![clear]));
    };
    let page = format!("/link/slack/{}", p.code);
    let client = Client(Some(crate::auth::client::client_ip(&state, peer.ip(), &headers)));
    match link(&state, &q, &p, client).await {
        Ok(view) => {
            let to = format!(
                "{page}?linked={}&as={}&runs_as_you={}",
                percent_encode(&view.slack_user),
                percent_encode(view.linked_to.as_deref().unwrap_or_default()),
                view.runs_as_linked_user
            );
            Ok(found(&to, vec![clear]))
        }
        Err(why) => {
            tracing::warn!(user = %p.user, reason = %why, "a Slack link was refused");
            let detail = serde_json::json!({"reason": why.0});
            audit::Action::new(&p.user, "automation.slack_link_refused", "slack").detail(detail).send(&state, client).await;
            Ok(found(&format!("{page}?slack_error={}", percent_encode(&why.0)), vec![clear]))
        }
    }
}

/// Slack's proof checked against the link, then the link made.
async fn link(state: &AppState, q: &CallbackQuery, p: &Pending, client: Client) -> Result<super::slack_links::SlackLinkView, OidcError> {
    if let Some(e) = &q.error {
        return Err(oidc::refusal(e, q.error_description.as_deref()));
    }
    // Rights as they are now, not as they were when the sign-in started.
    if let Err(refused) = state.accounts.principal(&p.user, KeyScope::Full, &p.credential, now_ms()) {
        return Err(OidcError(format!("you can no longer link here: {}", refused.message())));
    }
    let (link, revision) = super::slack_links::code_of(state, &p.code).await.map_err(|e| OidcError(e.message))?;
    let code = q.code.clone().ok_or_else(|| OidcError("Slack sent no code".into()))?;
    let (_, claims) = oidc::finish(state, &provider(state), code, &p.verifier, &p.nonce).await?;
    let (who, team) = (claims[USER_CLAIM].as_str().unwrap_or_default(), claims[TEAM_CLAIM].as_str());
    let same_team = link.team_id.as_deref().is_none_or(|t| team == Some(t));
    if who != link.slack_user || !same_team {
        return Err(OidcError(format!(
            "you signed in to Slack as {} of workspace {}, but this link is for {}{}: sign in to Slack as that user, or ask \
             the bot for a link of your own",
            if who.is_empty() { "nobody Slack named" } else { who },
            team.unwrap_or("(none named)"),
            link.slack_user,
            link.team_id.as_deref().map(|t| format!(" of workspace {t}")).unwrap_or_default()
        )));
    }
    super::slack_links::take(state, &p.code, revision).await.map_err(|e| OidcError(e.message))?;
    super::slack_links::bind(state, &p.user, &link, p.run_as_me, client).await.map_err(|e| OidcError(e.message))
}
