//! A conversation's plugins in its runs. `conversation_started` names each plugin's files by
//! their SHA-256 (see [`halyard_protocol::plugin`]); a run reads them from the user bucket,
//! writes them into the sandbox (under the sandbox user's home, never the workspace, and once:
//! a copy that is there already is kept), and takes from them what Halyard's agent uses:
//! commands (expanded when a message is `/name arguments`), named agents (for `delegate`),
//! hooks and MCP servers (with `${CLAUDE_PLUGIN_ROOT}` where the copy is).
//!
//! Plugin hooks need no consent beyond the install (the user, their organization or the
//! deployment chose the plugin); they run, like the repository's, in the sandbox as its user.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::plugins::{Components, ROOT_VAR, shell_word, slash_command};
use halyard_protocol::executor::HookRunRequest;
use halyard_protocol::plugin::{PluginBundle, PluginUse};
use halyard_protocol::system::HelperAgent;
use halyard_protocol::user::McpServerConfig;

use crate::ctx::Ctx;

/// Reads the files of each plugin the conversation has, beside its record.
pub async fn bundles(ctx: &Ctx, uses: &[PluginUse]) -> Result<Vec<(PluginUse, PluginBundle)>, String> {
    let read = halyard_platform::plugins::read_bundles(&ctx.user_kv, uses).await?;
    Ok(uses.iter().cloned().zip(read).collect())
}

/// The command a message names, and what it expands to: `Some((typed, expanded))` when the
/// message is `/name arguments` and one of the plugins has `name` (or `plugin:name`).
pub async fn expand(ctx: &Ctx, uses: &[PluginUse], text: &str) -> Option<(String, String)> {
    let (name, arguments) = slash_command(text)?;
    if uses.is_empty() {
        return None;
    }
    let read = match bundles(ctx, uses).await {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!(error = %e, "a slash command's plugins cannot be read; the message goes as typed");
            return None;
        }
    };
    for (_, bundle) in &read {
        let Ok(c) = Components::read(bundle, ROOT_VAR) else { continue };
        if let Some(command) = c.command(name) {
            return Some((text.trim().to_owned(), command.expand(arguments)));
        }
    }
    None
}

/// The plugins of a run, written into its sandbox and read there.
#[derive(Default)]
pub struct Installed {
    /// Each plugin's parts, `${CLAUDE_PLUGIN_ROOT}` resolved, with that root.
    pub plugins: Vec<(PluginUse, Components, String)>,
    /// Plugins that could not be used, in words.
    pub problems: Vec<String>,
}

/// The script that puts one plugin's files at `$HOME/.halyard/plugins/<name>-<sha>` and prints
/// where. They are written again at every run's start: what the agent changed there in an earlier
/// run (a hook script it "fixed") does not outlive that run. A helper, whose parent's run uses the
/// same folder, keeps a copy that is there.
fn install_script(u: &PluginUse, bundle: &PluginBundle, keep: bool) -> String {
    use base64::Engine;
    let dir = format!("{}-{}", u.name, &u.bundle[..u.bundle.len().min(16)]);
    let mut s = format!("set -eu\nroot=\"${{HOME:-/tmp}}/.halyard/plugins\"/{}\n", shell_word(&dir));
    if keep {
        let _ = writeln!(s, "if [ \"$(cat \"$root/.halyard-bundle\" 2>/dev/null)\" = {} ]; then echo \"$root\"; exit 0; fi", u.bundle);
    }
    s.push_str("tmp=\"$root.tmp.$$\"; rm -rf \"$tmp\"; mkdir -p \"$tmp\"\n");
    for (path, text) in &bundle.files {
        let target = format!("\"$tmp\"/{}", shell_word(path));
        if let Some((parent, _)) = path.rsplit_once('/') {
            let _ = writeln!(s, "mkdir -p \"$tmp\"/{}", shell_word(parent));
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
        let _ = writeln!(s, "base64 -d > {target} <<'PLUGIN_FILE_B64'\n{encoded}\nPLUGIN_FILE_B64");
        if bundle.executable.contains(path) {
            let _ = writeln!(s, "chmod +x {target}");
        }
    }
    let _ = write!(s, "echo {} > \"$tmp/.halyard-bundle\"\nrm -rf \"$root\"; mv \"$tmp\" \"$root\"\necho \"$root\"\n", u.bundle);
    s
}

/// Writes each plugin's files into the sandbox and reads its parts there (`helper`: a copy
/// already there is kept, see [`install_script`]).
pub async fn install(ctx: &Ctx, exec: &ExecutorClient, uses: &[PluginUse], helper: bool) -> Installed {
    let mut out = Installed::default();
    let read = match bundles(ctx, uses).await {
        Ok(read) => read,
        Err(e) => {
            out.problems.push(e);
            return out;
        }
    };
    for (u, bundle) in read {
        // (The name was checked when its marketplace was read; the SHA-256 is hex. Both go into
        // the script, so neither is taken on trust.)
        if u.bundle.is_empty() || !u.bundle.chars().all(|c| c.is_ascii_hexdigit()) {
            out.problems.push(format!("plugin {} names its files oddly ({:?})", u.id(), u.bundle));
            continue;
        }
        let req = HookRunRequest {
            command: "exec bash --noprofile --norc -s".into(),
            stdin: install_script(&u, &bundle, helper),
            timeout_secs: 60.0,
            env: BTreeMap::new(),
        };
        let root = match exec.run_hook(&req).await {
            Ok(r) if r.exit_code == Some(0) => r.stdout.trim().lines().last().unwrap_or_default().to_owned(),
            Ok(r) => {
                out.problems.push(format!("plugin {} could not be put in the sandbox: {}", u.id(), r.stderr.trim()));
                continue;
            }
            Err(e) => {
                out.problems.push(format!("plugin {} could not be put in the sandbox: {e}", u.id()));
                continue;
            }
        };
        match Components::read(&bundle, &root) {
            Ok(c) => out.plugins.push((u, c, root)),
            Err(e) => out.problems.push(format!("plugin {}: {e}", u.id())),
        }
    }
    out
}

impl Installed {
    /// The plugins' MCP servers, as `<server>` (or `<plugin>-<server>` when two plugins, or
    /// the owner, name one alike), with `CLAUDE_PLUGIN_ROOT` in a stdio server's environment.
    pub fn mcp_servers(&self, taken: &BTreeMap<String, McpServerConfig>) -> BTreeMap<String, McpServerConfig> {
        let mut out = BTreeMap::new();
        for (_, c, root) in &self.plugins {
            for (name, config) in &c.mcp_servers {
                let mut config = config.clone();
                if let McpServerConfig::Stdio { env, .. } = &mut config {
                    env.insert("CLAUDE_PLUGIN_ROOT".into(), root.clone());
                }
                let name = if taken.contains_key(name) || out.contains_key(name) { format!("{}-{name}", c.name) } else { name.clone() };
                out.insert(name, config);
            }
        }
        out
    }

    /// The named agents `delegate` can hand tasks to, by name.
    pub fn agents(&self) -> Vec<HelperAgent> {
        self.plugins
            .iter()
            .flat_map(|(_, c, _)| {
                c.agents.iter().map(|a| HelperAgent { name: a.name.clone(), prompt: a.prompt.clone(), tools: a.tools.clone() })
            })
            .collect()
    }

    /// The descriptions of those agents, for the tool's definition.
    pub fn agent_descriptions(&self) -> Vec<(String, String)> {
        self.plugins
            .iter()
            .flat_map(|(_, c, _)| c.agents.iter().map(|a| (a.name.clone(), a.description.clone().unwrap_or_default())))
            .collect()
    }
}
