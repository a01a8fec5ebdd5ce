//! One REST API that Halyard calls on an owner's behalf (a forge's): its base URL and the headers
//! that carry the owner's credentials. Every call checks its destination against the operator's
//! policy first and goes through the checked client ([`crate::http`]); an answer other than 2xx
//! comes back as an error that names the API, the status and the path (never the body).

use std::time::Duration;

use halyard_platform::{net, outbound};
use serde_json::Value;

/// Longest an API may take to answer.
const TIMEOUT: Duration = Duration::from_secs(20);

/// A REST API, with the owner's credentials.
pub struct Api {
    http: reqwest::Client,
    allow: Vec<String>,
    /// Prefixed to every path.
    base: String,
    headers: Vec<(&'static str, String)>,
    /// For errors: `GitHub`, `GitLab`...
    name: &'static str,
}

impl Api {
    pub fn new(name: &'static str, base: String, headers: Vec<(&'static str, String)>, allow: &[String]) -> Result<Self, String> {
        Ok(Self { http: crate::http(allow)?, allow: allow.to_vec(), base: base.trim_end_matches('/').to_owned(), headers, name })
    }

    /// `method` on the base URL followed by `path`, with `body` as JSON; the JSON answered.
    pub async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        net::check_destination(&url, &self.allow).await.map_err(|e| e.to_string())?;
        let mut req = self.http.request(method, &url).timeout(TIMEOUT).header("User-Agent", "halyard");
        for (k, v) in &self.headers {
            req = req.header(*k, v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| outbound::why(&e.without_url()))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("{} answered {status} to {path}", self.name));
        }
        Ok(resp.json().await.unwrap_or(Value::Null))
    }
}
