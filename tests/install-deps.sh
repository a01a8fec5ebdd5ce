#!/usr/bin/env bash
# Installs what only the tests need, if it is missing (infra/install-deps.sh installs what
# running needs):
#   - standardwebhooks, the reference library the webhook tests verify signatures with
#   - slack_sdk, Slack's own library, whose SignatureVerifier signs the Slack automation tests' requests
#   - schemathesis, the fuzzer the tests run against the served OpenAPI document
#   - mcp (the Python MCP SDK) and mcp-server-time, the MCP servers the tests connect to
#   - opentelemetry-proto, which decodes the traces Halyard exports over OTLP in the tests
#   - kubernetes-validate, which checks the manifests under infra/k8s against the API's schemas
#   - docker-compose (Debian), whose validation the tests run on infra/cluster/compose.yaml
#   - @octokit/webhooks-methods and @octokit/webhooks-examples (npm, tests/js): GitHub's own
#     signer and example payloads, and @linear/sdk, Linear's own verifier, for the automation tests;
#     oidc-provider, a certified OpenID provider, for the single sign-on tests
#   - openhands-ai (PyPI) in a Debian trixie tree of its own with Python 3.13, by
#     infra/install-openhands-client.sh: OpenHands' own Runtime API client, for the Runtime API's
#     tests (as root)
# Idempotent: re-running it changes nothing once everything is there.
set -euo pipefail

PY=${PYTHON:-python3}
need_pip=()
if ! "$PY" -c 'import standardwebhooks' >/dev/null 2>&1; then
  need_pip+=(standardwebhooks)
fi
if ! "$PY" -c 'import slack_sdk' >/dev/null 2>&1; then
  need_pip+=(slack_sdk)
fi
if ! command -v schemathesis >/dev/null 2>&1 && ! "$PY" -c 'import schemathesis' >/dev/null 2>&1; then
  need_pip+=(schemathesis)
fi
if ! "$PY" -c 'import mcp.server.mcpserver, mcp_server_time' >/dev/null 2>&1; then
  need_pip+=('mcp>=2' mcp-server-time)
fi
if ! "$PY" -c 'from opentelemetry.proto.collector.trace.v1 import trace_service_pb2' >/dev/null 2>&1; then
  need_pip+=(opentelemetry-proto)
fi
if ! "$PY" -c 'import kubernetes_validate' >/dev/null 2>&1; then
  need_pip+=(kubernetes-validate)
fi
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "installing for the tests: ${need_pip[*]}" >&2
  "$PY" -m pip install --quiet --disable-pip-version-check "${need_pip[@]}"
  hash -r
fi
if ! command -v docker-compose >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq docker-compose >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq docker-compose >/dev/null; }
fi
JS="$(dirname "$0")/js"
if [ ! -d "$JS/node_modules/@octokit/webhooks-methods" ] || [ ! -d "$JS/node_modules/@octokit/webhooks-examples" ] \
  || [ ! -d "$JS/node_modules/@linear/sdk" ] || [ ! -d "$JS/node_modules/oidc-provider" ]; then
  echo "installing for the tests: GitHub's and Linear's webhook libraries and an OpenID provider (npm, tests/js)" >&2
  (cd "$JS" && npm ci --no-audit --no-fund --silent)
fi
if [ "$(id -u)" = 0 ]; then
  bash "$(dirname "$0")/../infra/install-openhands-client.sh"
fi
