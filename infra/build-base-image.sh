#!/usr/bin/env bash
# Builds the Debian base image for Docker sandboxes without an image registry (none is
# reachable here): debootstrap a minimal bookworm with bash, git, python3 and CA certificates,
# add Debian's Chromium (the agent's browser), its IPython kernel with matplotlib (the agent's
# Python cells), code-server (the user's VS Code; copied from the host's
# /opt/halyard-code-server, which infra/install-code-server.sh fills) and the MCP time server
# (the example MCP server of services/gateway/README.md) in a venv at /opt/halyard-mcp, as process sandboxes have
# them, then `docker import` it
# as halyard-base:bookworm, with the third-party agents (/opt/halyard-agents, which
# infra/install-agents.sh fills; they run on code-server's Node) on top. Skips the work if the
# image exists with all of that, and adds only the agents' layer when they are what it lacks.
set -euo pipefail
IMAGE=${1:-halyard-base:bookworm}
# The agents as a layer of their own on `image` (they change more often than the rest).
add_agents() {
  local image=$1
  if ! bash "$(dirname "$0")/install-agents.sh" || ! [ -x /opt/halyard-agents/bin/claude-agent-acp ]; then
    echo "the third-party agents could not be installed (needs npm); $image goes without them" >&2
    return 0
  fi
  local c
  c=$(docker create "$image" /bin/true)
  # (Its contents: a layer over an older copy replaces that one instead of nesting in it.)
  docker cp -a /opt/halyard-agents/. "$c:/opt/halyard-agents"
  docker commit -c 'CMD ["/bin/bash"]' "$c" "$image" >/dev/null
  docker rm "$c" >/dev/null
  echo "added the third-party agents to $image" >&2
}
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  if docker run --rm --network none "$IMAGE" sh -c '(test -x /opt/halyard-mcp/bin/mcp-server-time || test -e /etc/halyard-no-mcp) && test -x /usr/bin/chromium && python3 -c "import ipykernel, matplotlib" && (/opt/halyard-code-server/bin/code-server --version || test -e /etc/halyard-no-code-server)' >/dev/null 2>&1; then
    bash "$(dirname "$0")/install-agents.sh" >/dev/null 2>&1 || true
    stamp=$(cat /opt/halyard-agents/.stamp 2>/dev/null || echo none)
    if docker run --rm --network none "$IMAGE" sh -c "test \"\$(cat /opt/halyard-agents/.stamp 2>/dev/null)\" = '$stamp' || test -e /etc/halyard-no-agents" >/dev/null 2>&1; then
      echo "$IMAGE already exists" >&2
      exit 0
    fi
    add_agents "$IMAGE"
    exit 0
  fi
  echo "$IMAGE lacks /opt/halyard-mcp, Chromium, the IPython kernel or code-server; building it again" >&2
fi
root=$(mktemp -d /var/tmp/halyard-rootfs.XXXXXX)
trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=bash,git,python3,python3-venv,ca-certificates,procps bookworm "$root" >/var/log/halyard-debootstrap.log 2>&1 \
  || { echo "debootstrap failed; see /var/log/halyard-debootstrap.log" >&2; exit 1; }
# Chromium for the agent's browser tools (with the security archive's updates, as the host
# gets them), fonts for the pages it renders, and the IPython kernel with matplotlib for its
# Python cells (python3-munkres answers fonttools' "scipy or munkres": scipy would bring a C++
# compiler and Boost's headers, half a gigabyte).
cp /etc/resolv.conf "$root/etc/resolv.conf"
echo "deb http://deb.debian.org/debian-security bookworm-security main" >>"$root/etc/apt/sources.list"
mount -t proc proc "$root/proc"
if ! { chroot "$root" apt-get update -qq && chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation python3-ipykernel python3-matplotlib python3-munkres; } \
     >>/var/log/halyard-debootstrap.log 2>&1; then
  echo "Chromium or the IPython kernel could not be installed in the image; see /var/log/halyard-debootstrap.log" >&2
  exit 1
fi
umount "$root/proc"
# The wheels come through this machine's pip (its index, proxy and certificates), for the
# image's Python; the image's own pip installs them offline.
chroot "$root" /usr/bin/python3 -m venv /opt/halyard-mcp
mkdir -p "$root/tmp/wheels"
if "${PYTHON:-python3}" -m pip download --quiet --disable-pip-version-check --dest "$root/tmp/wheels" --only-binary=:all: \
     --python-version 3.11 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 mcp-server-time >>/var/log/halyard-debootstrap.log 2>&1 \
   && chroot "$root" /opt/halyard-mcp/bin/pip install --quiet --disable-pip-version-check --no-index --find-links /tmp/wheels mcp-server-time \
     >>/var/log/halyard-debootstrap.log 2>&1; then
  :
else
  # Without it the image still serves; the MCP example in services/gateway/README.md then says the command is missing.
  echo "mcp-server-time could not be installed in the image (see /var/log/halyard-debootstrap.log); going on without it" >&2
  rm -rf "$root/opt/halyard-mcp"
  touch "$root/etc/halyard-no-mcp"
fi
# code-server as the host built it (same Debian, same architecture: its native modules load).
if bash "$(dirname "$0")/install-code-server.sh"; then
  cp -a /opt/halyard-code-server "$root/opt/halyard-code-server"
else
  # Without it the image still serves; its VS Code tab then says code-server is missing.
  echo "code-server could not be installed (needs npm); the image goes without it" >&2
  touch "$root/etc/halyard-no-code-server"
fi
rm -rf "$root/tmp/wheels" "$root/root/.cache"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
add_agents "$IMAGE"
echo "built $IMAGE" >&2
