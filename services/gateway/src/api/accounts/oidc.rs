//! OpenID Connect's authorization code flow with PKCE, as Halyard's two relying parties use it:
//! single sign-on to the web workspace ([`super::sso`]) and "Sign in with Slack", which proves
//! who a Slack user is before an automation runs as them
//! ([`crate::api::automations::slack_sign_in`]). Built on the `openidconnect` crate: discovery (kept
//! ten minutes per issuer), the code exchanged with the client secret and the PKCE verifier, the
//! ID token's signature checked against the provider's JWKS and its `iss`, `aud`, `exp` and
//! `nonce` against what this sign-in expects. What a flow keeps between its start and its
//! callback travels in a short-lived cookie signed with the deployment's secret.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreIdTokenClaims, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    TokenResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use halyard_platform::{keys, now_ms};

use crate::auth::cookies::https;
use crate::http::error::ApiError;
use crate::state::AppState;

/// How long the provider's metadata and keys are kept before they are read again.
const METADATA_TTL: Duration = Duration::from_secs(600);

/// What the provider's side of a flow failed at, in words for the page.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OidcError(pub(crate) String);

/// One provider as one relying party uses it.
pub struct Provider<'a> {
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub client_secret: &'a str,
    /// The callback's path under `/api/v1` (`/auth/sso/callback`).
    pub callback: &'a str,
}

impl Provider<'_> {
    /// Where the provider sends the browser back to.
    pub fn redirect_url(&self, state: &AppState) -> String {
        state.config.web_link(&format!("/api/v1{}", self.callback))
    }
}

/// What a flow keeps from its start for its callback to check.
pub struct Started {
    pub url: String,
    pub state: String,
    pub nonce: String,
    pub verifier: String,
}

/// One HTTP exchange with the provider (discovery, keys, token), through a client that follows
/// no redirect: the provider answers for itself.
async fn send(http: reqwest::Client, request: openidconnect::HttpRequest) -> Result<openidconnect::HttpResponse, OidcError> {
    let (parts, body) = request.into_parts();
    let response = http
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await
        .map_err(|e| OidcError(format!("the identity provider did not answer: {e}")))?;
    let mut out = openidconnect::http::Response::builder().status(response.status());
    for (name, value) in response.headers() {
        out = out.header(name, value);
    }
    let bytes = response.bytes().await.map_err(|e| OidcError(format!("the identity provider's answer broke off: {e}")))?;
    out.body(bytes.to_vec()).map_err(|e| OidcError(e.to_string()))
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
async fn metadata(issuer: &str) -> Result<CoreProviderMetadata, OidcError> {
    type Cache = HashMap<String, (Instant, CoreProviderMetadata)>;
    static CACHE: tokio::sync::Mutex<Option<Cache>> = tokio::sync::Mutex::const_new(None);
    let mut cache = CACHE.lock().await;
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some((at, m)) = cache.get(issuer) {
        if at.elapsed() < METADATA_TTL {
            return Ok(m.clone());
        }
    }
    let url = IssuerUrl::new(issuer.to_owned()).map_err(|e| OidcError(format!("the issuer URL: {e}")))?;
    let http = http_client();
    let client = |r| send(http.clone(), r);
    let m = CoreProviderMetadata::discover_async(url, &client)
        .await
        .map_err(|e| OidcError(format!("the identity provider's discovery failed: {}", chain(&e))))?;
    cache.insert(issuer.to_owned(), (Instant::now(), m.clone()));
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

async fn client(state: &AppState, p: &Provider<'_>) -> Result<Client, OidcError> {
    let redirect = RedirectUrl::new(p.redirect_url(state)).map_err(|e| OidcError(format!("the redirect URL: {e}")))?;
    let secret = (!p.client_secret.is_empty()).then(|| ClientSecret::new(p.client_secret.to_owned()));
    Ok(CoreClient::from_provider_metadata(metadata(p.issuer).await?, ClientId::new(p.client_id.to_owned()), secret)
        .set_redirect_uri(redirect))
}

/// The provider's authorization URL for `scopes` (beside `openid`), with a fresh state, nonce and
/// PKCE challenge.
pub async fn start(state: &AppState, p: &Provider<'_>, scopes: &[&str]) -> Result<Started, OidcError> {
    let client = client(state, p).await?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut request = client.authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random);
    for s in scopes {
        request = request.add_scope(Scope::new((*s).to_owned()));
    }
    let (url, csrf, nonce) = request.set_pkce_challenge(challenge).url();
    Ok(Started { url: url.to_string(), state: csrf.secret().clone(), nonce: nonce.secret().clone(), verifier: verifier.secret().clone() })
}

/// The provider's refusal, in words that repeat nothing it wrote (its description is logged).
pub fn refusal(error: &str, description: Option<&str>) -> OidcError {
    tracing::info!(error = %error.chars().take(64).collect::<String>(), description = %description.unwrap_or_default().chars().take(200).collect::<String>(), "the identity provider refused a sign-in");
    let code: String = error.chars().filter(|c| c.is_ascii_lowercase() || *c == '_').take(40).collect();
    OidcError(format!("the identity provider refused the sign-in ({code})"))
}

/// Exchanges `code` and checks the ID token (signature, issuer, audience, expiry, nonce): its
/// standard claims, and all of its claims as JSON (for those no standard names).
pub async fn finish(
    state: &AppState,
    p: &Provider<'_>,
    code: String,
    verifier: &str,
    nonce: &str,
) -> Result<(CoreIdTokenClaims, serde_json::Value), OidcError> {
    let client = client(state, p).await?;
    let http = http_client();
    let send_with = |r| send(http.clone(), r);
    let token = client
        .exchange_code(AuthorizationCode::new(code))
        .map_err(|e| OidcError(format!("the identity provider has no token endpoint: {e}")))?
        .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_owned()))
        .request_async(&send_with)
        .await
        .map_err(|e| OidcError(format!("the code exchange failed: {}", chain(&e))))?;
    let id_token = token.id_token().ok_or_else(|| OidcError("the identity provider sent no ID token".into()))?;
    let claims = id_token
        .claims(&client.id_token_verifier(), &Nonce::new(nonce.to_owned()))
        .map_err(|e| OidcError(format!("the ID token was refused: {}", chain(&e))))?
        .clone();
    // Read from the token just verified.
    let all = id_token
        .to_string()
        .split('.')
        .nth(1)
        .and_then(|p| URL_SAFE_NO_PAD.decode(p).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .unwrap_or_default();
    Ok((claims, all))
}

/// `value` signed for `purpose` with the deployment's secret, for a cookie.
pub fn seal<T: Serialize>(state: &AppState, purpose: &str, value: &T) -> String {
    let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap_or_default());
    let mac = keys::sign(&state.config.secret, purpose, body.as_bytes());
    format!("{body}.{mac}")
}

/// What a flow keeps from its start for its callback (each relying party adds its own fields).
pub trait Kept: Serialize + DeserializeOwned {
    /// The state sent to the provider, which must come back with the browser.
    fn state(&self) -> &str;
    /// When the flow started (Unix milliseconds).
    fn at_ms(&self) -> i64;
}

/// What [`seal`] sealed for `purpose`, if the signature holds and it is no older than
/// `max_secs`.
fn unseal<T: Kept>(state: &AppState, purpose: &str, sealed: &str, max_secs: i64) -> Option<T> {
    let (body, mac) = sealed.split_once('.')?;
    let expected = keys::sign(&state.config.secret, purpose, body.as_bytes());
    if !keys::constant_time_eq(mac.as_bytes(), expected.as_bytes()) {
        return None;
    }
    let value: T = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()?;
    (now_ms() - value.at_ms() <= max_secs * 1000).then_some(value)
}

/// The provider's redirect back.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    /// The issuer, where the provider names itself (RFC 9207; checked where a flow uses it).
    #[serde(default)]
    pub iss: Option<String>,
    /// The provider's refusal, if it refused.
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub error_description: Option<String>,
}

/// The flow this browser started (sealed for `purpose` in cookie `cookie`), if the callback's
/// `state` is that flow's. Anyone can send a browser to a callback with any query: until its
/// own state is shown, nothing of the query may be shown or recorded (an audit trail or a page
/// that repeated `error_description` would say what a stranger wrote).
pub fn returning<T: Kept>(
    state: &AppState,
    headers: &HeaderMap,
    cookie: &str,
    purpose: &str,
    max_secs: i64,
    q: &CallbackQuery,
) -> Option<T> {
    let sealed = crate::auth::cookies::named_cookie(headers, cookie)?;
    let kept: T = unseal(state, purpose, &sealed, max_secs)?;
    keys::constant_time_eq(q.state.as_deref().unwrap_or_default().as_bytes(), kept.state().as_bytes()).then_some(kept)
}

/// The flow's cookie (HttpOnly, SameSite=Lax: the provider's redirect back is a cross-site
/// navigation), for the callback's path only.
pub fn state_cookie(headers: &HeaderMap, name: &str, path: &str, value: &str, max_age: i64) -> Result<HeaderValue, ApiError> {
    let secure = if https(headers) { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{name}={value}; HttpOnly; SameSite=Lax; Path={path}; Max-Age={max_age}{secure}"))
        .map_err(ApiError::internal)
}

/// 303 to `to`, setting `cookies`.
pub fn found(to: &str, cookies: Vec<HeaderValue>) -> Response {
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_owned())]).into_response();
    for c in cookies {
        r.headers_mut().append(header::SET_COOKIE, c);
    }
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
