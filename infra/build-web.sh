#!/usr/bin/env bash
# Builds the web workspace into web/dist when it is missing or older than its sources (npm ci
# first when the packages are missing or the lock file changed). Needs Node 20+ and npm; without
# them it says so and exits 0, since Halyard runs without the UI (`/` then says how to build
# it). With --require (the tests need the app), a missing npm is an error.
set -euo pipefail
cd "$(dirname "$0")/../web"
if ! command -v npm >/dev/null 2>&1; then
  if [ "${1:-}" = --require ]; then
    echo "npm is needed to build the web workspace (apt-get install nodejs npm)" >&2
    exit 1
  fi
  echo "npm not found: the web workspace is not built; Halyard runs without it" >&2
  exit 0
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
if [ ! -f dist/index.html ] || [ -n "$(find src scripts openapi.json index.html package-lock.json vite.config.ts tsconfig.json -newer dist/index.html -print -quit)" ]; then
  npm run --silent build >/dev/null
  echo "built the web workspace in web/dist" >&2
fi
