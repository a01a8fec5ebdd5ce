//! The one HTTP client forge calls go through: every call checks its destination against the
//! operator's policy first (as webhooks do, so a forge cannot turn Halyard against the operator's
//! own network), follows no redirect (which could lead past that check), and turns an answer
//! other than 2xx into a [`ForgeError`] that says what to do.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use crate::net;

/// Longest a forge may take to answer.
const TIMEOUT: Duration = Duration::from_secs(20);
/// How much of a refusal's body an error keeps (the forge's own words on what was wrong).
const BODY_CHARS: usize = 300;

/// An error calling a forge, in words for the user.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error("`{0}` providers have no repository API; use a github or gitlab provider")]
    NoApi(String),
    #[error("the API cannot be called: {0}")]
    Destination(#[from] crate::net::DestinationError),
    #[error("the API could not be reached: {0}")]
    Unreachable(String),
    #[error("the API refused the token (HTTP {0}); store a valid one with PUT /api/v1/git-providers/<name>")]
    Refused(u16),
    #[error("the API found no such thing (HTTP 404: {0}); check the repository's name and that the token reaches it")]
    NotFound(String),
    #[error("the API answered HTTP {0}: {1}")]
    Status(u16, String),
    #[error("the API answered something else than expected: {0}")]
    Malformed(String),
}

/// A forge's REST API, with the owner's credentials.
pub struct Api {
    http: reqwest::Client,
    allow: Vec<String>,
    /// Prefixed to every path.
    base: String,
    headers: Vec<(&'static str, String)>,
}

/// Clients by the destinations they may reach: a client is made once per policy (a connection
/// pool and TLS set-up each), not per call.
fn client(allow: &[String]) -> Result<reqwest::Client, ForgeError> {
    static CLIENTS: Mutex<Vec<(Vec<String>, reqwest::Client)>> = Mutex::new(Vec::new());
    let mut clients = CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = clients.iter().find(|(a, _)| a == allow) {
        return Ok(c.clone());
    }
    let built = crate::outbound::builder(allow)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| ForgeError::Unreachable(e.to_string()))?;
    clients.push((allow.to_vec(), built.clone()));
    Ok(built)
}

impl Api {
    pub fn new(base: &str, headers: Vec<(&'static str, String)>, allow: &[String]) -> Result<Self, ForgeError> {
        Ok(Self { http: client(allow)?, allow: allow.to_vec(), base: base.trim_end_matches('/').to_owned(), headers })
    }

    /// `method` on the base URL followed by `path` (or on `path` itself when it is a whole
    /// URL), with `body` as JSON; the JSON answered (`null` for an empty answer).
    pub async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<Value, ForgeError> {
        let url =
            if path.starts_with("https://") || path.starts_with("http://") { path.to_owned() } else { format!("{}{path}", self.base) };
        net::check_destination(&url, &self.allow).await?;
        let mut request = self.http.request(method, &url).timeout(TIMEOUT).header("User-Agent", "halyard");
        for (k, v) in &self.headers {
            request = request.header(*k, v);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let resp = request.send().await.map_err(|e| ForgeError::Unreachable(crate::outbound::why(&e.without_url())))?;
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Err(ForgeError::Refused(status));
        }
        if !resp.status().is_success() {
            let body: String = resp.text().await.unwrap_or_default().chars().take(BODY_CHARS).collect();
            return Err(if status == 404 { ForgeError::NotFound(body) } else { ForgeError::Status(status, body) });
        }
        let bytes = resp.bytes().await.map_err(|e| ForgeError::Unreachable(e.without_url().to_string()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| ForgeError::Malformed(e.to_string()))
    }

    /// [`Self::send`], the answer read as `T`.
    pub async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, ForgeError> {
        let v = self.send(reqwest::Method::GET, path, None).await?;
        serde_json::from_value(v).map_err(|e| ForgeError::Malformed(e.to_string()))
    }
}
