//! A real OpenID provider for the single sign-on tests: npm's `oidc-provider` (certified), run
//! by `tests/js/oidc-provider.mjs` with one confidential client, on a port of its own.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The running provider; stopped when dropped.
pub struct OidcProvider {
    pub issuer: String,
    child: Child,
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

impl OidcProvider {
    /// Starts it with client `client_id`/`secret`, which may send people back to `redirect_uri`
    /// only, and waits for its discovery document.
    pub async fn start(client_id: &str, secret: &str, redirect_uri: &str) -> Self {
        Self::start_as(client_id, secret, redirect_uri, &[]).await
    }

    /// Starts it standing in for Sign in with Slack: the login `<team id>/<user id>` signs in as
    /// that Slack user, named in the ID token as Slack names them.
    pub async fn start_slack(client_id: &str, secret: &str, redirect_uri: &str) -> Self {
        Self::start_as(client_id, secret, redirect_uri, &["slack"]).await
    }

    async fn start_as(client_id: &str, secret: &str, redirect_uri: &str, more: &[&str]) -> Self {
        let port = free_port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/js/oidc-provider.mjs");
        let child = Command::new("node")
            .arg(script)
            .args([&port.to_string(), client_id, secret, redirect_uri])
            .args(more)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs tests/js/oidc-provider.mjs (run tests/install-deps.sh)");
        let p = Self { issuer: format!("http://127.0.0.1:{port}"), child };
        let deadline = Instant::now() + Duration::from_secs(20);
        let discovery = format!("{}/.well-known/openid-configuration", p.issuer);
        loop {
            if reqwest::get(&discovery).await.is_ok_and(|r| r.status().is_success()) {
                return p;
            }
            assert!(Instant::now() < deadline, "the OpenID provider did not start (tests/js: npm ci)");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Has the token endpoint hand out tampered ID tokens (`wrong-audience`, `expired`) or
    /// true ones (`ok`).
    pub async fn mode(&self, to: &str) {
        let r = reqwest::Client::new().post(format!("{}/__mode?to={to}", self.issuer)).send().await.expect("the provider answers");
        assert!(r.status().is_success());
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser's way through a sign-in, by hand: from `start` (a Halyard route that sends the
/// browser to the provider; called with `bearer` as the signed-in user's key), through the
/// provider's login form (as `login`, any password) and any consent form, back to Halyard's
/// callback, keeping each host's cookies. Returns where the callback sends the browser (a page of
/// the web app, with what it says in its query).
pub async fn sign_in_through(start: &str, bearer: &str, login: &str) -> String {
    walk(start, bearer, login, false).await.0
}

/// [`sign_in_through`] up to Halyard's callback, which is not called: its URL, and the cookies
/// Halyard set in this browser (as a `cookie` header), for a test to change something first.
pub async fn up_to_callback(start: &str, bearer: &str, login: &str) -> (String, String) {
    walk(start, bearer, login, true).await
}

/// Halyard's callback (from [`up_to_callback`]) called with that browser's `cookies`: the page
/// it sends the browser to (a 303), its query decoded for reading (`/orgs?org=acme&error=no way`).
pub async fn call_back(callback: &str, cookies: &str) -> String {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("a client");
    let response = http.get(callback).header("cookie", cookies).send().await.expect("the callback answers");
    let location = response.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or_default().to_owned();
    assert_eq!(response.status(), 303, "{location}");
    let to = reqwest::Url::parse(callback).and_then(|u| u.join(&location)).expect("a location URL");
    let query: Vec<String> = to.query_pairs().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}?{}", to.path(), query.join("&"))
}

async fn walk(start: &str, bearer: &str, login: &str, stop_at_callback: bool) -> (String, String) {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("a client");
    let base = reqwest::Url::parse(start).expect("a URL");
    let mut jar: std::collections::HashMap<String, std::collections::BTreeMap<String, String>> = Default::default();
    let (mut url, mut form): (reqwest::Url, Option<Vec<(String, String)>>) = (base.clone(), None);
    for _ in 0..20 {
        let host = host_of(&url);
        let mut request = match form.take() {
            Some(fields) => {
                // (Form-encoded as a query is.)
                let mut encoder = reqwest::Url::parse("http://form.invalid/").expect("a URL");
                encoder.query_pairs_mut().extend_pairs(&fields);
                let body = encoder.query().unwrap_or_default().to_owned();
                http.post(url.clone()).header("content-type", "application/x-www-form-urlencoded").body(body)
            }
            None => http.get(url.clone()),
        };
        let cookies: Vec<String> = jar.get(&host).into_iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
        if !cookies.is_empty() {
            request = request.header("cookie", cookies.join("; "));
        }
        if url == base {
            request = request.bearer_auth(bearer);
        }
        let response = request.send().await.expect("the step answers");
        for set in response.headers().get_all("set-cookie") {
            let pair = set.to_str().unwrap_or_default().split(';').next().unwrap_or_default();
            if let Some((k, v)) = pair.split_once('=') {
                jar.entry(host.clone()).or_default().insert(k.trim().to_owned(), v.to_owned());
            }
        }
        let status = response.status();
        if status.is_redirection() {
            let location = response.headers()["location"].to_str().expect("a location").to_owned();
            url = url.join(&location).expect("a location URL");
            let ours: Vec<String> = jar.get(&host_of(&base)).into_iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
            // Back at Halyard, past its callback: a page of the web app.
            if url.origin() == base.origin() && !url.path().starts_with("/api/") {
                return (url.to_string(), ours.join("; "));
            }
            if stop_at_callback && host_of(&url) != host && url.origin() == base.origin() {
                return (url.to_string(), ours.join("; "));
            }
            continue;
        }
        let page = response.text().await.unwrap_or_default();
        assert!(status.is_success() && page.contains("<form"), "{url}: {status} {page}");
        let action = page.split("action=\"").nth(1).and_then(|r| r.split('"').next()).expect("a form action");
        let mut fields: Vec<(String, String)> = page
            .split("<input")
            .skip(1)
            .filter(|i| i.contains("type=\"hidden\""))
            .filter_map(|i| {
                let name = i.split("name=\"").nth(1)?.split('"').next()?;
                let value = i.split("value=\"").nth(1).and_then(|v| v.split('"').next()).unwrap_or_default();
                Some((name.to_owned(), value.to_owned()))
            })
            .collect();
        if page.contains("name=\"login\"") {
            fields.extend([("login".to_owned(), login.to_owned()), ("password".to_owned(), "any".to_owned())]);
        }
        url = url.join(action).expect("a form URL");
        form = Some(fields);
    }
    panic!("the sign-in took more than twenty steps")
}

/// A URL's host and port, as the cookie jar keys them.
fn host_of(url: &reqwest::Url) -> String {
    url.host_str().unwrap_or_default().to_owned() + &url.port().map(|p| format!(":{p}")).unwrap_or_default()
}
