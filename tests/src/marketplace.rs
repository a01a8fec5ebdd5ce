//! A plugin marketplace as its authors keep one: a git repository (`acme-plugins.git`, bare,
//! served by [`crate::GitServer`] from the folder it is made in) with
//! `.claude-plugin/marketplace.json` and two plugins in Claude Code's format: `kit` (a skill, a
//! `/review` command, a `reviewer` agent, a PreToolUse hook on `Bash` that refuses `rm -rf`,
//! and a stdio MCP server `weather` built with the Python MCP SDK) and `guard` (a skill).

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::git;

/// The marketplace's working copy and the bare repository it is published to.
pub struct Marketplace {
    pub src: PathBuf,
    pub bare: PathBuf,
}

impl Marketplace {
    /// Makes it under `root`, at version 1.0.0 of `kit`.
    pub fn create(root: &Path) -> Self {
        let src = root.join("acme-plugins.src");
        std::fs::create_dir_all(&src).expect("source dir");
        git(&src, &["init", "-q", "-b", "main"]);
        let market = Self { src, bare: root.join("acme-plugins.git") };
        market.commit("1.0.0", "Review $1 with care. Focus: $ARGUMENTS");
        git(root, &["clone", "-q", "--bare", "acme-plugins.src", "acme-plugins.git"]);
        market
    }

    /// Publishes a new version of `kit` whose `/review` expands to `review`.
    pub fn publish(&self, version: &str, review: &str) {
        self.commit(version, review);
        git(&self.src, &["push", "-q", self.bare.to_str().expect("utf-8 path"), "main"]);
    }

    fn commit(&self, version: &str, review: &str) {
        let files = marketplace_files(version, review);
        write(&self.src, &files.iter().map(|(p, t)| (*p, t.as_str())).collect::<Vec<_>>());
        git(&self.src, &["add", "."]);
        git(&self.src, &["commit", "-qm", version]);
    }
}

fn write(root: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let file = root.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        if path.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
}

/// The marketplace's repository, as its authors write it.
fn marketplace_files(version: &str, review: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            ".claude-plugin/marketplace.json",
            json!({"name": "acme-tools", "owner": {"name": "Acme"}, "plugins": [
                {"name": "kit", "source": "./plugins/kit", "description": "Review kit"},
                {"name": "guard", "source": "./plugins/guard", "description": "House rules"}
            ]})
            .to_string(),
        ),
        ("plugins/kit/.claude-plugin/plugin.json", json!({"name": "kit", "version": version}).to_string()),
        ("plugins/kit/skills/release-notes/SKILL.md", "---\nname: release-notes\ndescription: Write release notes.\n---\nRELEASE-NOTES-SKILL-7c1".into()),
        ("plugins/kit/commands/review.md", format!("---\ndescription: Review a file\nargument-hint: <file>\n---\n{review}")),
        (
            "plugins/kit/agents/reviewer.md",
            "---\nname: reviewer\ndescription: Reviews code strictly.\ntools: Read, Grep\nmodel: inherit\n---\nREVIEWER-PROMPT-19d: you are a strict reviewer.".into(),
        ),
        (
            "plugins/kit/hooks/hooks.json",
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "${CLAUDE_PLUGIN_ROOT}/scripts/no-rm.sh"}]}]}})
                .to_string(),
        ),
        (
            "plugins/kit/scripts/no-rm.sh",
            "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in *'rm -rf'*) echo \"rm -rf is not allowed by kit ($CLAUDE_PLUGIN_ROOT)\" >&2; exit 2;; esac\nexit 0\n".into(),
        ),
        (
            "plugins/kit/.mcp.json",
            json!({"mcpServers": {"weather": {"command": "/opt/halyard-mcp/bin/python", "args": ["${CLAUDE_PLUGIN_ROOT}/servers/weather.py"]}}})
                .to_string(),
        ),
        (
            "plugins/kit/servers/weather.py",
            "from mcp.server.mcpserver import MCPServer\n\nserver = MCPServer(\"weather\")\n\n\n@server.tool()\ndef forecast(city: str) -> str:\n    \"\"\"The weather in a city.\"\"\"\n    return f\"sunny in {city} (kit weather)\"\n\n\nserver.run()\n".into(),
        ),
        ("plugins/guard/.claude-plugin/plugin.json", json!({"name": "guard", "version": "0.1.0"}).to_string()),
        ("plugins/guard/skills/house-rules/SKILL.md", "---\nname: house-rules\ndescription: The house rules.\n---\nHOUSE-RULES-2b8".into()),
    ]
}
