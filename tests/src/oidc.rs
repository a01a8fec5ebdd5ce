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
        let port = free_port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/js/oidc-provider.mjs");
        let child = Command::new("node")
            .arg(script)
            .args([&port.to_string(), client_id, secret, redirect_uri])
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
