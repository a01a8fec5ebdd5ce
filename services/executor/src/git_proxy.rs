//! The inner half of the git proxy: a relay ([`crate::relay`]) on the sandbox's loopback that
//! git reaches for the conversation's repository, and the `GET /git/proxy` WebSocket its
//! requests travel over to whoever holds it (the agent runner while a run lasts, the
//! conversations service for the clone at start). The holder adds the user's token upstream
//! (`halyard_platform::git_proxy`); nothing of it passes through here.
//!
//! Git is pointed at the listener by `url.<proxy>.insteadOf` rules in a config file the shell's
//! git includes (`GIT_CONFIG_*` variables, see [`GitProxy::shell_env`]); the holder names the
//! remotes when it connects, and the file is rewritten then. The remote URL in `.git/config`
//! stays the repository's own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::ws::WebSocket;

use crate::relay::Relay;

/// The executor's side of the proxy.
pub struct GitProxy {
    relay: Arc<Relay>,
    /// The git config file of `insteadOf` rules.
    include: PathBuf,
}

impl std::fmt::Debug for GitProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitProxy").field("include", &self.include).finish_non_exhaustive()
    }
}

impl GitProxy {
    /// Listens on the loopback and keeps its rules file in `dir` (the sandbox's temporary
    /// directory, private to its user).
    pub fn start(dir: &Path) -> std::io::Result<Arc<Self>> {
        let unheld = "Halyard's git proxy reaches this repository only while the agent works (or while the workspace is prepared)";
        let relay = Relay::start(unheld, &["authorization", "cookie"])?;
        let include = dir.join(format!("halyard-git-{}.config", std::process::id()));
        crate::private::write_private(&include, "")?;
        Ok(Arc::new(Self { relay, include }))
    }

    /// The variables that make the shell's git read the rules file.
    pub fn shell_env(&self) -> Vec<(String, String)> {
        vec![
            ("GIT_CONFIG_COUNT".into(), "1".into()),
            ("GIT_CONFIG_KEY_0".into(), "include.path".into()),
            ("GIT_CONFIG_VALUE_0".into(), self.include.display().to_string()),
            // Never wait on a terminal nobody is at.
            ("GIT_TERMINAL_PROMPT".into(), "0".into()),
        ]
    }

    /// Points git at the proxy for each of `urls` (and the same URL with or without `.git`).
    fn set_remotes(&self, urls: &[String]) -> std::io::Result<()> {
        let mut text = String::from("# Written by Halyard: the conversation's repository goes through its git proxy.\n");
        for url in urls {
            let Some((_, rest)) = url.split_once("://") else { continue };
            let bare = rest.trim_end_matches('/');
            let bare = bare.strip_suffix(".git").unwrap_or(bare);
            let scheme = &url[..url.len() - rest.len()];
            // `insteadOf` matches a prefix: the `.git` form and the bare form both land on the
            // proxy with the path git asked for.
            text.push_str(&format!("[url \"{}/{bare}\"]\n\tinsteadOf = {scheme}{bare}\n", self.relay.base()));
        }
        crate::private::write_private(&self.include, &text)
    }

    /// Serves one holder's WebSocket until it closes.
    pub async fn serve_holder(self: Arc<Self>, socket: WebSocket) {
        let relay = self.relay.clone();
        relay.serve_holder(socket, |urls| self.set_remotes(urls)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rules_send_both_spellings_of_the_remote_to_the_proxy() {
        let dir = tempfile::tempdir().unwrap();
        let proxy = GitProxy::start(dir.path()).unwrap();
        proxy.set_remotes(&["https://github.com/acme/app.git".into()]).unwrap();
        let text = std::fs::read_to_string(&proxy.include).unwrap();
        assert!(
            text.contains(&format!("[url \"{}/github.com/acme/app\"]\n\tinsteadOf = https://github.com/acme/app\n", proxy.relay.base())),
            "{text}"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&proxy.include).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
