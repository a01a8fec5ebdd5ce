//! What the executor's tests share: the configuration they start from, and an executor serving
//! it on a free port of this machine.

use std::path::Path;
use std::time::Duration;

use halyard_executor::ExecutorConfig;

/// An executor's configuration for `workspace` and `key`: a 10,000-byte output cap, no disk
/// limit, the browser and VS Code stopped after ten minutes unused. Tests change what they test.
pub fn config(workspace: &Path, key: &str) -> ExecutorConfig {
    ExecutorConfig {
        workspace: workspace.to_owned(),
        session_key: key.into(),
        output_cap: 10_000,
        disk_limit: 0,
        browser_idle: Duration::from_secs(600),
        vscode_idle: Duration::from_secs(600),
    }
}

/// Serves `config` until the test ends; its base URL.
pub async fn serve(config: ExecutorConfig) -> String {
    let listener = halyard_executor::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(halyard_executor::serve(config, listener, std::future::pending()));
    format!("http://{addr}")
}
