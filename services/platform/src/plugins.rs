//! Reading plugins and marketplaces as Claude Code writes them, so the plugins already published
//! work unchanged. Parsing only: the gateway reads what a plugin would add before it is
//! installed, the conversation manager its skills, the agent runner its commands, agents, hooks
//! and MCP servers.
//!
//! - `.claude-plugin/marketplace.json`: `{name, description?, plugins: [{name, source, description?,
//!   version?}]}`, a `source` being a folder of the same repository (`./plugins/x`) or another
//!   repository (`{"source": "url", "url", "ref"?, "path"?}`, `{"source": "github", "repo"}`).
//! - A plugin's folder: `.claude-plugin/plugin.json` (optional: `name`, `version`, `description`,
//!   and paths or inline objects for `commands`, `agents`, `hooks`, `mcpServers`), `skills/<name>/
//!   SKILL.md`, `commands/**/*.md` (a subfolder namespaces: `frontend/test.md` is `frontend:test`),
//!   `agents/*.md`, `hooks/hooks.json`, `.mcp.json`. `${CLAUDE_PLUGIN_ROOT}` in hooks and servers
//!   is where the plugin's files are in the sandbox.

use std::collections::BTreeMap;

use halyard_protocol::event::Skill;
use halyard_protocol::plugin::{PluginAdds, PluginBundle};
use halyard_protocol::user::McpServerConfig;
use serde::Deserialize;
use serde_json::Value;

/// Where a marketplace's list is, in its repository.
pub const MARKETPLACE_FILE: &str = ".claude-plugin/marketplace.json";
/// A plugin's manifest, in its folder.
pub const MANIFEST_FILE: &str = ".claude-plugin/plugin.json";
/// What `${CLAUDE_PLUGIN_ROOT}` stands for.
pub const ROOT_VAR: &str = "${CLAUDE_PLUGIN_ROOT}";

/// One entry of a marketplace's list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub description: Option<String>,
    pub version: Option<String>,
    pub source: ListedSource,
}

/// Where a listed plugin's files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListedSource {
    /// A folder of the marketplace's own repository (no `./`, no trailing `/`; empty: its root).
    Here(String),
    /// Another repository: its URL, the branch or tag, and the folder in it.
    Repository { url: String, git_ref: Option<String>, path: String },
}

/// A marketplace's list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarketplaceFile {
    pub name: String,
    pub description: Option<String>,
    pub plugins: Vec<Listed>,
}

/// A plugin or marketplace name: what Claude Code accepts (kebab-case, no spaces), at most 64.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !name.starts_with('.');
    if ok { Ok(()) } else { Err(format!("{what} `{name}` is not a name: use letters, digits, `-`, `_` and `.`, up to 64")) }
}

/// A folder path of a repository: relative, no `..`, normalized without `./` or a trailing `/`.
fn folder(path: &str) -> Result<String, String> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if path.starts_with('/') || parts.contains(&"..") {
        return Err(format!("`{path}` leaves the repository: sources are folders inside it"));
    }
    Ok(parts.join("/"))
}

/// Reads `marketplace.json`. `Err` says what is wrong, for the one who added it.
pub fn parse_marketplace(text: &str) -> Result<MarketplaceFile, String> {
    #[derive(Deserialize)]
    struct File {
        name: String,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        metadata: Option<Metadata>,
        plugins: Vec<Entry>,
    }
    #[derive(Deserialize)]
    struct Metadata {
        #[serde(default)]
        description: Option<String>,
        #[serde(default, rename = "pluginRoot")]
        plugin_root: Option<String>,
    }
    #[derive(Deserialize)]
    struct Entry {
        name: String,
        source: Value,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        version: Option<String>,
    }
    let file: File = serde_json::from_str(text).map_err(|e| format!("{MARKETPLACE_FILE} is not a marketplace: {e}"))?;
    check_name("the marketplace", &file.name)?;
    let root = file.metadata.as_ref().and_then(|m| m.plugin_root.clone()).unwrap_or_default();
    let mut plugins = Vec::new();
    for e in file.plugins {
        check_name("a plugin", &e.name)?;
        if plugins.iter().any(|p: &Listed| p.name == e.name) {
            return Err(format!("{MARKETPLACE_FILE} lists `{}` twice", e.name));
        }
        let source = match &e.source {
            Value::String(path) if path.starts_with("./") || path == "." => ListedSource::Here(folder(path)?),
            // A bare name is under `metadata.pluginRoot`.
            Value::String(path) => ListedSource::Here(folder(&format!("{root}/{path}"))?),
            Value::Object(o) => {
                let s = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
                let url = match s("source").as_deref() {
                    Some("url" | "git") => s("url").ok_or_else(|| format!("plugin `{}`: a `url` source needs `url`", e.name))?,
                    Some("github") => {
                        let repo = s("repo").ok_or_else(|| format!("plugin `{}`: a `github` source needs `repo`", e.name))?;
                        format!("https://github.com/{repo}.git")
                    }
                    other => {
                        return Err(format!(
                            "plugin `{}`: source `{}` is not one Halyard installs from; use a folder (`./…`), `url` or `github`",
                            e.name,
                            other.unwrap_or("?")
                        ));
                    }
                };
                ListedSource::Repository { url, git_ref: s("ref"), path: folder(&s("path").unwrap_or_default())? }
            }
            _ => return Err(format!("plugin `{}`: `source` must be a folder or an object", e.name)),
        };
        plugins.push(Listed { name: e.name, description: e.description, version: e.version, source });
    }
    let description = file.description.or(file.metadata.and_then(|m| m.description));
    Ok(MarketplaceFile { name: file.name, description, plugins })
}

/// A slash command: `/name arguments`, expanded from its Markdown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub name: String,
    pub description: Option<String>,
    pub argument_hint: Option<String>,
    pub body: String,
}

impl Command {
    /// The prompt `/name arguments` stands for: `$ARGUMENTS` is all of them, `$1` to `$9` each
    /// (split at spaces); a body that uses neither gets them after it.
    pub fn expand(&self, arguments: &str) -> String {
        let arguments = arguments.trim();
        let words: Vec<&str> = arguments.split_whitespace().collect();
        let mut out = self.body.replace("$ARGUMENTS", arguments);
        for i in (1..=9).rev() {
            out = out.replace(&format!("${i}"), words.get(i - 1).copied().unwrap_or(""));
        }
        let uses = self.body.contains("$ARGUMENTS") || (1..=9).any(|i| self.body.contains(&format!("${i}")));
        if !uses && !arguments.is_empty() {
            out = format!("{}\n\nARGUMENTS: {arguments}", out.trim_end());
        }
        out.trim().to_owned()
    }
}

/// A named helper: `delegate` hands it a task, and it works with this prompt, these tools and
/// this model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentDef {
    pub name: String,
    pub description: Option<String>,
    /// The tools it may use (Claude Code's or Halyard's names; absent: all of the parent's).
    pub tools: Option<Vec<String>>,
    /// `inherit`, a Claude model alias, or one of the owner's LLM profiles.
    pub model: Option<String>,
    pub prompt: String,
}

/// What one plugin brings, read from its files.
#[derive(Clone, Debug, Default)]
pub struct Components {
    pub name: String,
    pub skills: Vec<Skill>,
    pub commands: Vec<Command>,
    pub agents: Vec<AgentDef>,
    /// Its hooks file's object (`{"PreToolUse": [...]}`), `${CLAUDE_PLUGIN_ROOT}` resolved.
    pub hooks: Option<Value>,
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Manifest {
    name: Option<String>,
    commands: Option<Value>,
    agents: Option<Value>,
    hooks: Option<Value>,
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<Value>,
}

/// Strings or a list of them (plugin.json's extra paths).
fn paths(v: &Option<Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

/// The Markdown files under `dir` (or the file `dir` names), with their path below it.
fn markdown_under<'a>(bundle: &'a PluginBundle, dir: &str) -> Vec<(String, &'a str)> {
    let dir = folder(dir).unwrap_or_default();
    let prefix = format!("{dir}/");
    bundle
        .files
        .iter()
        .filter_map(|(path, text)| {
            if *path == dir && path.ends_with(".md") {
                let name = path.rsplit('/').next().unwrap_or(path);
                return Some((name.to_owned(), text.as_str()));
            }
            path.strip_prefix(&prefix).filter(|rest| rest.ends_with(".md")).map(|rest| (rest.to_owned(), text.as_str()))
        })
        .collect()
}

fn frontmatter(text: &str) -> Result<(serde_yaml_ng::Value, &str), String> {
    match crate::skills::split_frontmatter(text) {
        Some((yaml, body)) if !yaml.trim().is_empty() => {
            Ok((serde_yaml_ng::from_str(yaml).map_err(|e| format!("invalid frontmatter: {e}"))?, body))
        }
        Some((_, body)) => Ok((serde_yaml_ng::Value::Null, body)),
        None => Ok((serde_yaml_ng::Value::Null, text)),
    }
}

fn text_field(front: &serde_yaml_ng::Value, key: &str) -> Option<String> {
    front.get(key).and_then(|v| v.as_str()).map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// Replaces `${CLAUDE_PLUGIN_ROOT}` in every string of `v`.
fn rooted(v: Value, root: &str) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace(ROOT_VAR, root)),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| rooted(x, root)).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, x)| (k, rooted(x, root))).collect()),
        other => other,
    }
}

/// A word for a shell command line, quoted where it needs it.
pub fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A JSON file of the bundle, or an inline object.
fn json_of(bundle: &PluginBundle, v: &Value, what: &str) -> Result<Option<Value>, String> {
    match v {
        Value::String(path) => {
            let path = folder(path)?;
            let text = bundle.files.get(&path).ok_or_else(|| format!("{what} `{path}` is not in the plugin"))?;
            serde_json::from_str(text).map(Some).map_err(|e| format!("{path} is not JSON: {e}"))
        }
        Value::Object(_) => Ok(Some(v.clone())),
        Value::Null => Ok(None),
        _ => Err(format!("{what} must be a path or an object")),
    }
}

/// An MCP server of `.mcp.json`, as Halyard configures one.
fn mcp_server(name: &str, v: &Value) -> Result<McpServerConfig, String> {
    let strings = |k: &str| -> BTreeMap<String, String> {
        v.get(k)
            .and_then(Value::as_object)
            .map(|o| o.iter().filter_map(|(k, x)| x.as_str().map(|s| (k.clone(), s.to_owned()))).collect())
            .unwrap_or_default()
    };
    if let Some(command) = v.get("command").and_then(Value::as_str) {
        let args: Vec<String> = v
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| x.as_str().map(shell_word)).collect())
            .unwrap_or_default();
        let line = std::iter::once(shell_word(command)).chain(args).collect::<Vec<_>>().join(" ");
        return Ok(McpServerConfig::Stdio { command: line, env: strings("env") });
    }
    match (v.get("type").and_then(Value::as_str), v.get("url").and_then(Value::as_str)) {
        (Some("http") | None, Some(url)) => Ok(McpServerConfig::Http { url: url.to_owned(), headers: strings("headers") }),
        (Some(kind), _) => Err(format!("MCP server `{name}`: transport `{kind}` is not supported; use stdio (`command`) or `http`")),
        (None, None) => Err(format!("MCP server `{name}` has neither `command` nor `url`")),
    }
}

impl Components {
    /// Reads a plugin's files; `root` is where they are in the sandbox. `Err` names the file and
    /// what is wrong with it.
    pub fn read(bundle: &PluginBundle, root: &str) -> Result<Self, String> {
        let manifest: Manifest = match bundle.files.get(MANIFEST_FILE) {
            Some(text) => serde_json::from_str(text).map_err(|e| format!("{MANIFEST_FILE}: {e}"))?,
            None => Manifest::default(),
        };
        let name = manifest.name.clone().unwrap_or_else(|| bundle.name.clone());
        let mut out = Self { name, ..Default::default() };
        for (path, text) in markdown_under(bundle, "skills") {
            let Some(skill) = path.strip_suffix("/SKILL.md").filter(|s| !s.contains('/')) else { continue };
            let mut parsed = crate::skills::parse(skill, text, true).map_err(|e| format!("skills/{path}: {e}"))?;
            parsed.name = format!("{}:{}", out.name, parsed.name);
            out.skills.push(parsed);
        }
        for dir in std::iter::once("commands".to_owned()).chain(paths(&manifest.commands)) {
            for (path, text) in markdown_under(bundle, &dir) {
                let (front, body) = frontmatter(text).map_err(|e| format!("{dir}/{path}: {e}"))?;
                let name = path.trim_end_matches(".md").replace('/', ":");
                if out.commands.iter().any(|c| c.name == name) {
                    continue;
                }
                let (description, argument_hint) = (text_field(&front, "description"), text_field(&front, "argument-hint"));
                out.commands.push(Command { name, description, argument_hint, body: body.trim().to_owned() });
            }
        }
        for dir in std::iter::once("agents".to_owned()).chain(paths(&manifest.agents)) {
            for (path, text) in markdown_under(bundle, &dir) {
                let (front, body) = frontmatter(text).map_err(|e| format!("{dir}/{path}: {e}"))?;
                let name = text_field(&front, "name").unwrap_or_else(|| path.trim_end_matches(".md").replace('/', "-"));
                let tools = match front.get("tools") {
                    Some(serde_yaml_ng::Value::String(s)) => {
                        Some(s.split(',').map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect())
                    }
                    Some(serde_yaml_ng::Value::Sequence(seq)) => Some(seq.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect()),
                    _ => None,
                };
                let def = AgentDef {
                    name,
                    description: text_field(&front, "description"),
                    tools,
                    model: text_field(&front, "model"),
                    prompt: body.trim().to_owned(),
                };
                if !out.agents.iter().any(|a| a.name == def.name) {
                    out.agents.push(def);
                }
            }
        }
        let hooks = match &manifest.hooks {
            Some(v) => json_of(bundle, v, "`hooks`")?,
            None => json_of(bundle, &Value::String("hooks/hooks.json".into()), "hooks").ok().flatten(),
        };
        out.hooks = hooks.map(|h| rooted(h.get("hooks").cloned().unwrap_or(h), root));
        let servers = match &manifest.mcp_servers {
            Some(v) => json_of(bundle, v, "`mcpServers`")?,
            None => json_of(bundle, &Value::String(".mcp.json".into()), "servers").ok().flatten(),
        };
        if let Some(servers) = servers.map(|s| rooted(s.get("mcpServers").cloned().unwrap_or(s), root)) {
            let Value::Object(map) = servers else { return Err(".mcp.json must map server names to servers".into()) };
            for (name, v) in map {
                // Its tools are offered as `<name>__<tool>`, which models take only in these
                // characters.
                let fits = (1..=40).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
                if !fits {
                    return Err(format!("MCP server `{name}`: name it with letters, digits, `-` and `_`, up to 40"));
                }
                out.mcp_servers.insert(name.clone(), mcp_server(&name, &v)?);
            }
        }
        Ok(out)
    }

    /// What it adds, by name (the Plugins page shows it before installing).
    pub fn adds(&self) -> PluginAdds {
        let hooks = match &self.hooks {
            Some(Value::Object(o)) => o.keys().cloned().collect(),
            _ => Vec::new(),
        };
        PluginAdds {
            skills: self.skills.iter().map(|s| s.name.clone()).collect(),
            commands: self.commands.iter().map(|c| c.name.clone()).collect(),
            agents: self.agents.iter().map(|a| a.name.clone()).collect(),
            hooks,
            mcp_servers: self.mcp_servers.keys().cloned().collect(),
        }
    }

    /// The command `/name` names: its own name, or `plugin:name`.
    pub fn command(&self, name: &str) -> Option<&Command> {
        let own = name.strip_prefix(&format!("{}:", self.name)).unwrap_or(name);
        self.commands.iter().find(|c| c.name == own)
    }
}

/// `/name arguments` of a message, if it is a slash command.
pub fn slash_command(text: &str) -> Option<(&str, &str)> {
    let rest = text.trim_start().strip_prefix('/')?;
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_:.".contains(c))).then_some((name, args))
}

/// The files of each plugin in `uses`, from the user bucket, in order (the conversation manager
/// reads their skills, the agent runner all the rest). `Err` names the first that cannot be read.
pub async fn read_bundles(
    user_kv: &async_nats::jetstream::kv::Store,
    uses: &[halyard_protocol::plugin::PluginUse],
) -> Result<Vec<PluginBundle>, String> {
    let mut out = Vec::with_capacity(uses.len());
    for u in uses {
        let key = halyard_protocol::subjects::plugin_bundle_key(&u.bundle);
        let bytes = user_kv
            .get(&key)
            .await
            .map_err(|e| format!("plugin {} cannot be read: {e}", u.id()))?
            .ok_or_else(|| format!("plugin {}'s files ({}) are not kept any more", u.id(), u.bundle))?;
        out.push(serde_json::from_slice(&bytes).map_err(|e| format!("plugin {}'s files are unreadable: {e}", u.id()))?);
    }
    Ok(out)
}

/// The SHA-256 (hex) of a bundle's files: its name in the user bucket.
pub fn bundle_sha256(bundle: &PluginBundle) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for (path, text) in &bundle.files {
        h.update((path.len() as u64).to_be_bytes());
        h.update(path.as_bytes());
        h.update(if bundle.executable.contains(path) { [1u8] } else { [0u8] });
        h.update((text.len() as u64).to_be_bytes());
        h.update(text.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(files: &[(&str, &str)]) -> PluginBundle {
        PluginBundle {
            name: "kit".into(),
            commit: "c".into(),
            files: files.iter().map(|(p, t)| ((*p).to_owned(), (*t).to_owned())).collect(),
            executable: Default::default(),
        }
    }

    #[test]
    fn a_plugin_is_read_as_claude_code_reads_it() {
        let b = bundle(&[
            (MANIFEST_FILE, r#"{"name": "kit", "version": "1.0.0"}"#),
            ("skills/pdf/SKILL.md", "---\nname: pdf\ndescription: Read PDFs.\n---\nUse pdftotext."),
            ("commands/review.md", "---\ndescription: Review a file\nargument-hint: <file>\n---\nReview $1 carefully ($ARGUMENTS)."),
            ("commands/git/log.md", "Show the log."),
            ("agents/reviewer.md", "---\nname: reviewer\ndescription: Reviews\ntools: Read, Grep\nmodel: inherit\n---\nYou review code."),
            (
                "hooks/hooks.json",
                r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "${CLAUDE_PLUGIN_ROOT}/guard.sh"}]}]}}"#,
            ),
            (
                ".mcp.json",
                r#"{"mcpServers": {"weather": {"command": "python3", "args": ["${CLAUDE_PLUGIN_ROOT}/w.py", "a b"], "env": {"K": "${KEY}"}}}}"#,
            ),
        ]);
        let c = Components::read(&b, "/p/kit").unwrap();
        assert_eq!(c.skills[0].name, "kit:pdf");
        assert_eq!(c.command("review").unwrap().expand("main.rs now"), "Review main.rs carefully (main.rs now).");
        assert_eq!(c.command("kit:git:log").unwrap().expand("-3"), "Show the log.\n\nARGUMENTS: -3");
        assert_eq!(c.agents[0].tools.as_deref(), Some(&["Read".to_owned(), "Grep".to_owned()][..]));
        assert_eq!(c.hooks.as_ref().unwrap()["PreToolUse"][0]["hooks"][0]["command"], "/p/kit/guard.sh");
        let McpServerConfig::Stdio { command, env } = &c.mcp_servers["weather"] else { panic!("stdio") };
        assert_eq!((command.as_str(), env["K"].as_str()), ("python3 /p/kit/w.py 'a b'", "${KEY}"));
        let adds = c.adds();
        assert_eq!(
            (adds.commands.len(), adds.hooks.as_slice(), adds.mcp_servers.as_slice()),
            (2, &["PreToolUse".to_owned()][..], &["weather".to_owned()][..])
        );
        let spaced = bundle(&[(".mcp.json", r#"{"mcpServers": {"my server": {"command": "x"}}}"#)]);
        assert!(Components::read(&spaced, "/p").unwrap_err().contains("`my server`"));
        assert_eq!(slash_command("  /review src/a.rs"), Some(("review", "src/a.rs")));
        assert_eq!(slash_command("/ not"), None);
        assert_eq!(slash_command("a /review"), None);
    }

    #[test]
    fn marketplaces_are_read_with_their_sources() {
        let m = parse_marketplace(
            r#"{"name": "acme", "owner": {"name": "A"}, "plugins": [
                {"name": "kit", "source": "./plugins/kit/", "version": "1.0.0"},
                {"name": "far", "source": {"source": "url", "url": "https://git.example/far.git", "ref": "v2"}},
                {"name": "gh", "source": {"source": "github", "repo": "o/r"}}
            ]}"#,
        )
        .unwrap();
        assert_eq!(m.plugins[0].source, ListedSource::Here("plugins/kit".into()));
        assert!(matches!(&m.plugins[1].source, ListedSource::Repository { git_ref: Some(r), .. } if r == "v2"));
        assert!(matches!(&m.plugins[2].source, ListedSource::Repository { url, .. } if url == "https://github.com/o/r.git"));
        let e = parse_marketplace(r#"{"name": "x", "plugins": [{"name": "a", "source": "./../etc"}]}"#).unwrap_err();
        assert!(e.contains("leaves the repository"), "{e}");
        assert!(parse_marketplace(r#"{"name": "bad name", "plugins": []}"#).unwrap_err().contains("not a name"));
    }
}
