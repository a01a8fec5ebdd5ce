//! Single sign-on to the web workspace: OpenID Connect's authorization code flow with PKCE
//! against the operator's identity provider (`HALYARD_OIDC_ISSUER`, client id and secret), by
//! the `openidconnect` crate: discovery, the code exchanged with the client secret and the PKCE
//! verifier, the ID token's signature checked against the provider's JWKS and its `iss`, `aud`,
//! `exp` and `nonce` against what this sign-in expects.
//!
//! `GET /auth/sso/start` sends the browser to the provider with a fresh state, nonce and PKCE
//! challenge, kept until it comes back in a short-lived cookie signed with the deployment's
//! secret (`halyard_sso`, HttpOnly, SameSite=Lax: the provider's redirect back is a cross-site
//! navigation). `GET /auth/sso/callback` checks all of it, then finds the user the provider
//! names (`<issuer>#<sub>`) or makes one from the e-mail address, places them in the
//! organizations whose `sso_domains` hold their verified address's domain or whose `sso_groups`
//! meet their `groups` claim, opens a session as a key's sign-in does, and sends the browser
//! home. A refused sign-in goes home with `?sso_error=` saying why, and is an audit record.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    TokenResponse,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use halyard_platform::{keys, now_ms};
use halyard_protocol::UserId;
use halyard_protocol::accounts::KeyScope;

use crate::AppState;
use crate::accounts::audit;
use crate::accounts::session::{https, open_session};
use crate::api_doc::Refusals;
use crate::error::ApiError;

/// The cookie that carries a sign-in from its start to its callback.
const STATE_COOKIE: &str = "halyard_sso";
/// How long a sign-in may take at the provider.
const STATE_SECS: i64 = 600;
/// How long the provider's metadata and keys are kept before they are read again.
const METADATA_TTL: Duration = Duration::from_secs(600);

/// Whether the web workspace offers single sign-on.
#[derive(Debug, Serialize, ToSchema)]
pub struct SsoStatus {
    pub enabled: bool,
}

/// Whether single sign-on is configured (the sign-in page asks, before anyone is signed in).
#[utoipa::path(get, path = "/auth/sso", tag = "accounts", security(()), responses((status = 200, body = SsoStatus)))]
pub async fn status(State(state): State<AppState>) -> Json<SsoStatus> {
    Json(SsoStatus { enabled: configured(&state) })
}

fn configured(state: &AppState) -> bool {
    let g = &state.config.gateway;
    !g.oidc_issuer.is_empty() && !g.oidc_client_id.is_empty()
}

/// Where the provider sends the browser back to.
fn redirect_url(state: &AppState) -> String {
    let base = if state.config.gateway.public_url.is_empty() {
        format!("http://{}", state.config.http_addr)
    } else {
        state.config.gateway.public_url.clone()
    };
    format!("{base}/api/v1/auth/sso/callback")
}

/// What the provider's side of the flow failed at, in words for the sign-in page.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SsoError(pub(crate) String);

/// One HTTP exchange with the provider (discovery, keys, token), through a client that follows
/// no redirect: the provider answers for itself.
async fn send(http: reqwest::Client, request: openidconnect::HttpRequest) -> Result<openidconnect::HttpResponse, SsoError> {
    let (parts, body) = request.into_parts();
    let response = http
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await
        .map_err(|e| SsoError(format!("the identity provider did not answer: {e}")))?;
    let mut out = openidconnect::http::Response::builder().status(response.status());
    for (name, value) in response.headers() {
        out = out.header(name, value);
    }
    let bytes = response.bytes().await.map_err(|e| SsoError(format!("the identity provider's answer broke off: {e}")))?;
    out.body(bytes.to_vec()).map_err(|e| SsoError(e.to_string()))
}

fn http_client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default()
        })
        .clone()
}

/// The provider's metadata and signing keys, read at most every ten minutes (a key the provider
/// rotated in is read at the next sign-in after that).
async fn metadata(state: &AppState) -> Result<CoreProviderMetadata, SsoError> {
    static CACHE: tokio::sync::Mutex<Option<(Instant, String, CoreProviderMetadata)>> = tokio::sync::Mutex::const_new(None);
    let issuer = &state.config.gateway.oidc_issuer;
    let mut cache = CACHE.lock().await;
    if let Some((at, cached_issuer, m)) = cache.as_ref() {
        if at.elapsed() < METADATA_TTL && cached_issuer == issuer {
            return Ok(m.clone());
        }
    }
    let url = IssuerUrl::new(issuer.clone()).map_err(|e| SsoError(format!("HALYARD_OIDC_ISSUER: {e}")))?;
    let http = http_client();
    let client = |r| send(http.clone(), r);
    let m = CoreProviderMetadata::discover_async(url, &client)
        .await
        .map_err(|e| SsoError(format!("the identity provider's discovery failed: {}", chain(&e))))?;
    *cache = Some((Instant::now(), issuer.clone(), m.clone()));
    Ok(m)
}

/// An error and its causes, in one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

/// What a sign-in keeps between its start and its callback.
#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    state: String,
    nonce: String,
    verifier: String,
    return_to: String,
    at_ms: i64,
}

fn seal(state: &AppState, p: &Pending) -> String {
    let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(p).unwrap_or_default());
    let mac = keys::sign(&state.config.secret, "sso-state", body.as_bytes());
    format!("{body}.{mac}")
}

fn unseal(state: &AppState, value: &str) -> Option<Pending> {
    let (body, mac) = value.split_once('.')?;
    let expected = keys::sign(&state.config.secret, "sso-state", body.as_bytes());
    if !keys::constant_time_eq(mac.as_bytes(), expected.as_bytes()) {
        return None;
    }
    let p: Pending = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()?;
    (now_ms() - p.at_ms <= STATE_SECS * 1000).then_some(p)
}

fn state_cookie(headers: &HeaderMap, value: &str, max_age: i64) -> Result<HeaderValue, ApiError> {
    let secure = if https(headers) { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{STATE_COOKIE}={value}; HttpOnly; SameSite=Lax; Path=/api/v1/auth/sso; Max-Age={max_age}{secure}"))
        .map_err(ApiError::internal)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StartQuery {
    /// The page to come back to (a path of this site; `/` if absent).
    #[serde(default)]
    pub return_to: Option<String>,
}

/// A path of this site to come back to: never another site's.
/// Only visible ASCII without a backslash counts: a browser drops tabs and line breaks from a URL
/// and reads a backslash as `/`, so `/%09/evil.example` would lead to another site.
fn local_path(p: Option<&str>) -> String {
    match p {
        Some(p)
            if p.starts_with('/') && !p.starts_with("//") && p.len() <= 2048 && p.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') =>
        {
            p.to_owned()
        }
        _ => "/".to_owned(),
    }
}

fn found(to: &str, cookies: Vec<HeaderValue>) -> Response {
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_owned())]).into_response();
    for c in cookies {
        r.headers_mut().append(header::SET_COOKIE, c);
    }
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Sends the browser to the identity provider (303), to sign in and come back to
/// `/auth/sso/callback`; 404 `sso_not_configured` without one.
#[utoipa::path(get, path = "/auth/sso/start", tag = "accounts", security(()), params(StartQuery),
    responses((status = 303, description = "to the identity provider"), Refusals))]
pub async fn start(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<StartQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    if !configured(&state) {
        return Err(not_configured());
    }
    let client = client(&state).await.map_err(|e| ApiError::unavailable(e.0))?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, csrf, nonce) = client
        .authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random)
        .add_scope(Scope::new("email".into()))
        .add_scope(Scope::new("profile".into()))
        .add_scope(Scope::new("groups".into()))
        .set_pkce_challenge(challenge)
        .url();
    let pending = Pending {
        state: csrf.secret().clone(),
        nonce: nonce.secret().clone(),
        verifier: verifier.secret().clone(),
        return_to: local_path(q.return_to.as_deref()),
        at_ms: now_ms(),
    };
    Ok(found(url.as_str(), vec![state_cookie(&headers, &seal(&state, &pending), STATE_SECS)?]))
}

fn not_configured() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "sso_not_configured",
        "this deployment has no identity provider (HALYARD_OIDC_ISSUER, HALYARD_OIDC_CLIENT_ID, HALYARD_OIDC_CLIENT_SECRET); sign in with an API key",
    )
}

type Client = openidconnect::Client<
    openidconnect::EmptyAdditionalClaims,
    openidconnect::core::CoreAuthDisplay,
    openidconnect::core::CoreGenderClaim,
    openidconnect::core::CoreJweContentEncryptionAlgorithm,
    openidconnect::core::CoreJsonWebKey,
    openidconnect::core::CoreAuthPrompt,
    openidconnect::StandardErrorResponse<openidconnect::core::CoreErrorResponseType>,
    openidconnect::core::CoreTokenResponse,
    openidconnect::core::CoreTokenIntrospectionResponse,
    openidconnect::core::CoreRevocableToken,
    openidconnect::core::CoreRevocationErrorResponse,
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

async fn client(state: &AppState) -> Result<Client, SsoError> {
    let g = &state.config.gateway;
    let redirect = RedirectUrl::new(redirect_url(state)).map_err(|e| SsoError(format!("the redirect URL: {e}")))?;
    let secret = (!g.oidc_client_secret.is_empty()).then(|| ClientSecret::new(g.oidc_client_secret.clone()));
    Ok(CoreClient::from_provider_metadata(metadata(state).await?, ClientId::new(g.oidc_client_id.clone()), secret)
        .set_redirect_uri(redirect))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    /// The provider's refusal, if it refused.
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub error_description: Option<String>,
}

/// Who the provider says signed in.
pub(crate) struct Identity {
    pub subject: String,
    pub email: Option<String>,
    pub email_verified: bool,
    pub name: Option<String>,
    pub groups: Vec<String>,
}

/// The provider's answer (303): a session and home, or home with `?sso_error=` saying why not.
#[utoipa::path(get, path = "/auth/sso/callback", tag = "accounts", security(()), params(CallbackQuery),
    responses((status = 303, description = "home, signed in or saying why not"), Refusals))]
pub async fn callback(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    query: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    if !configured(&state) {
        return Err(not_configured());
    }
    let ip = crate::common::client_ip(&state, peer.ip(), &headers);
    let clear = state_cookie(&headers, "", 0)?;
    let pending = crate::accounts::session::named_cookie(&headers, STATE_COOKIE).and_then(|v| unseal(&state, &v));
    // Anyone can send a browser here with any query: until the sign-in's own state is shown,
    // nothing of the query is shown or recorded (an audit trail or a sign-in page that repeated
    // `error_description` would say what a stranger wrote).
    let Some(pending) = pending.filter(|p| keys::constant_time_eq(q.state.as_deref().unwrap_or_default().as_bytes(), p.state.as_bytes()))
    else {
        tracing::info!("a single sign-on callback without this browser's sign-in state");
        let to =
            format!("/?sso_error={}", halyard_platform::net::percent_encode("this sign-in expired or was not started here; start again"));
        return Ok(found(&to, vec![clear]));
    };
    let identity = match verify(&state, &q, &pending).await {
        Ok(i) => i,
        Err(why) => return Ok(refused(&state, ip, why, clear).await),
    };
    let user = match crate::accounts::sso_users::provision(&state, &identity, ip).await? {
        Ok(user) => user,
        Err(why) => return Ok(refused(&state, ip, why, clear).await),
    };
    let principal = state
        .accounts
        .principal(&user, KeyScope::Full, &format!("sso:{}", identity.subject), now_ms())
        .map_err(|r| ApiError::new(StatusCode::FORBIDDEN, "user_disabled", format!("you cannot sign in: {}", r.message())))?;
    let detail = serde_json::json!({"via": "sso", "issuer": state.config.gateway.oidc_issuer});
    let (session, _) = open_session(&state, &principal, &headers, ip, detail).await?;
    Ok(found(&local_path(Some(&pending.return_to)), vec![clear, session]))
}

/// A sign-in of this browser's refused: recorded, and home saying why.
async fn refused(state: &AppState, ip: std::net::IpAddr, why: SsoError, clear: HeaderValue) -> Response {
    tracing::warn!(reason = %why, "a single sign-on was refused");
    let nobody = UserId("-".into());
    let a = audit::Action::new(&nobody, "session.refused", "sso").detail(serde_json::json!({"via": "sso", "reason": why.0}));
    audit::record(state, a, Some(ip)).await;
    let to = format!("/?sso_error={}", halyard_platform::net::percent_encode(&why.0));
    found(&to, vec![clear])
}

/// Everything the callback checks, in order; the identity, or why not.
async fn verify(state: &AppState, q: &CallbackQuery, pending: &Pending) -> Result<Identity, SsoError> {
    if let Some(e) = &q.error {
        // OAuth's error codes are a few lower-case words; the description is free text from
        // the provider, kept to the log.
        tracing::info!(error = %e.chars().take(64).collect::<String>(), description = %q.error_description.as_deref().unwrap_or_default().chars().take(200).collect::<String>(), "the identity provider refused a sign-in");
        let code: String = e.chars().filter(|c| c.is_ascii_lowercase() || *c == '_').take(40).collect();
        return Err(SsoError(format!("the identity provider refused the sign-in ({code})")));
    }
    let code = q.code.clone().ok_or_else(|| SsoError("the identity provider sent no code".into()))?;
    let client = client(state).await?;
    let http = http_client();
    let send_with = |r| send(http.clone(), r);
    let token = client
        .exchange_code(AuthorizationCode::new(code))
        .map_err(|e| SsoError(format!("the identity provider has no token endpoint: {e}")))?
        .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier.clone()))
        .request_async(&send_with)
        .await
        .map_err(|e| SsoError(format!("the code exchange failed: {}", chain(&e))))?;
    let id_token = token.id_token().ok_or_else(|| SsoError("the identity provider sent no ID token".into()))?;
    // Signature (the provider's keys), issuer, audience, expiry and nonce.
    let claims = id_token
        .claims(&client.id_token_verifier(), &Nonce::new(pending.nonce.clone()))
        .map_err(|e| SsoError(format!("the ID token was refused: {}", chain(&e))))?;
    // `groups` is no standard claim: read from the token just verified.
    let groups = id_token
        .to_string()
        .split('.')
        .nth(1)
        .and_then(|p| URL_SAFE_NO_PAD.decode(p).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["groups"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|g| g.as_str().map(str::to_owned))
        .collect();
    Ok(Identity {
        subject: format!("{}#{}", claims.issuer().as_str(), claims.subject().as_str()),
        email: claims.email().map(|e| e.as_str().to_lowercase()),
        email_verified: claims.email_verified().unwrap_or(false),
        name: claims.name().and_then(|n| n.get(None)).map(|n| n.as_str().to_owned()),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::local_path;

    #[test]
    fn only_this_sites_paths_come_back() {
        for ok in ["/", "/c/123?tab=files", "/settings#profiles"] {
            assert_eq!(local_path(Some(ok)), ok);
        }
        for bad in ["//evil.example", "/\t/evil.example", "/\\evil.example", "/\n/evil", "https://evil.example", "/ x", "evil"] {
            assert_eq!(local_path(Some(bad)), "/", "{bad:?}");
        }
    }
}
