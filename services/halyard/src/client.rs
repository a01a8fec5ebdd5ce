//! The gateway's HTTP API as the command-line client uses it: where it is and which key to send
//! (flags, `HALYARD_URL`/`HALYARD_API_KEY`, else the file `halyard login` wrote), and one call
//! that turns the API's error body into words.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// The gateway and key a command talks to.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    /// `http(s)://host:port`, without a trailing slash.
    pub url: String,
    key: String,
}

/// Where `halyard login` keeps the gateway and key: `$XDG_CONFIG_HOME/halyard/cli.json`, else
/// `~/.config/halyard/cli.json` (mode 0600).
pub fn login_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("halyard").join("cli.json"))
}

/// What `halyard login` saved, if anything.
fn saved() -> Option<(String, String)> {
    let text = std::fs::read_to_string(login_file()?).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    Some((v["url"].as_str()?.to_owned(), v["api_key"].as_str()?.to_owned()))
}

/// Saves the gateway and key for later commands, readable by this user only.
pub fn save_login(url: &str, key: &str) -> Result<PathBuf> {
    let path = login_file().context("cannot tell where to save the login: set HOME or XDG_CONFIG_HOME")?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&json!({"url": url, "api_key": key}))?;
    halyard_platform::bus_auth::write_private(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

impl Client {
    /// The gateway at `url` (else the saved one, else localhost) with `key` (else the saved one).
    pub fn new(url: Option<String>, key: Option<String>) -> Result<Self> {
        let saved = saved();
        let url = url.or_else(|| saved.as_ref().map(|s| s.0.clone())).unwrap_or_else(|| "http://127.0.0.1:3000".into());
        // The saved key goes only to the gateway it was saved for.
        let saved_key = saved.filter(|(at, _)| at.trim_end_matches('/') == url.trim_end_matches('/')).map(|(_, k)| k);
        let key = key.or(saved_key).context("no API key: run `halyard login`, or set HALYARD_API_KEY (or --api-key)")?;
        Ok(Self::with(url, key))
    }

    pub fn with(url: String, key: String) -> Self {
        // Kept-alive connections are dropped after 5 s idle, before the gateway closes them (10 s
        // by default): a request never goes out on a connection the gateway is closing.
        let http = reqwest::Client::builder()
            .pool_idle_timeout(std::time::Duration::from_secs(5))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self { http, url: url.trim_end_matches('/').to_owned(), key }
    }

    /// The WebSocket at `/api/v1{path}` (ws:// or wss:// as the gateway's URL says), with the key.
    pub async fn websocket(
        &self,
        path: &str,
    ) -> Result<tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let url = format!("{}/api/v1{path}", self.url.replacen("http", "ws", 1));
        let mut request = url.into_client_request()?;
        request.headers_mut().insert("authorization", format!("Bearer {}", self.key).parse()?);
        let (socket, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(socket)
    }

    /// One call to `/api/v1{path}`: the JSON answer, or the API's error in words.
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
        let mut req = self.http.request(method, format!("{}/api/v1{path}", self.url)).bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp =
            req.send().await.map_err(|e| anyhow::anyhow!("cannot reach Halyard at {}: is it running? (HALYARD_URL) ({e})", self.url))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(value);
        }
        let code = value["error"]["code"].as_str().unwrap_or("error");
        let message = value["error"]["message"].as_str().map(str::to_owned).unwrap_or_else(|| value.to_string());
        bail!("{code} ({status}): {message}")
    }

    /// A download from `/api/v1{path}`, streamed into `out` as it arrives; the API's error in
    /// words if it refuses.
    pub async fn download(&self, path: &str, out: &mut (dyn std::io::Write + Send)) -> Result<u64> {
        let mut resp = self
            .http
            .get(format!("{}/api/v1{path}", self.url))
            .bearer_auth(&self.key)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach Halyard at {}: is it running? (HALYARD_URL) ({e})", self.url))?;
        let status = resp.status();
        if !status.is_success() {
            let value: Value = resp.json().await.unwrap_or_default();
            let code = value["error"]["code"].as_str().unwrap_or("error");
            bail!("{code} ({status}): {}", value["error"]["message"].as_str().unwrap_or("no message"));
        }
        let mut written = 0;
        while let Some(chunk) = resp.chunk().await.context("the download broke off; try again")? {
            out.write_all(&chunk)?;
            written += chunk.len() as u64;
        }
        out.flush()?;
        Ok(written)
    }

    /// `bytes` sent raw to `/api/v1{path}` with PUT (a file upload): the JSON answer.
    pub async fn upload(&self, path: &str, bytes: Vec<u8>) -> Result<Value> {
        let resp = self
            .http
            .put(format!("{}/api/v1{path}", self.url))
            .bearer_auth(&self.key)
            .header("content-type", "application/octet-stream")
            .body(bytes)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach Halyard at {}: is it running? (HALYARD_URL) ({e})", self.url))?;
        let status = resp.status();
        let value: Value = resp.json().await.unwrap_or_default();
        if !status.is_success() {
            let code = value["error"]["code"].as_str().unwrap_or("error");
            bail!("{code} ({status}): {}", value["error"]["message"].as_str().unwrap_or("no message"));
        }
        Ok(value)
    }

    pub async fn get(&self, path: &str) -> Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Result<Value> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }
}
