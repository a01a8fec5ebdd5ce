//! Servers the tests start from `tests/servers/*.py` that take their port as their first
//! argument (the MCP servers built with the Python SDK): on a free loopback port, waited for
//! until they listen, killed when dropped.

use std::time::Duration;

/// A Python server of `tests/servers/`, listening on `port`.
pub struct PythonServer {
    pub port: u16,
    child: std::process::Child,
}

impl PythonServer {
    /// Runs `tests/servers/{script}` with a free port as its first argument and `args` after it,
    /// and waits (up to 30 s) until the port takes connections.
    pub async fn start(script: &str, args: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
        let path = format!("{}/servers/{script}", env!("CARGO_MANIFEST_DIR"));
        let child = std::process::Command::new("python3")
            .arg(&path)
            .arg(port.to_string())
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("python3 runs {path} (tests/install-deps.sh installs its packages): {e}"));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(std::time::Instant::now() < deadline, "{script} did not start listening");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { port, child }
    }

    /// Its MCP endpoint, for the MCP servers among them.
    pub fn mcp_url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
