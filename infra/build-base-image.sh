#!/usr/bin/env bash
# Builds the Debian base image for Docker sandboxes without an image registry (none is
# reachable here): debootstrap a minimal bookworm with bash, git, python3 and CA certificates,
# then `docker import` it as halyard-base:bookworm. Skips the work if the image exists.
set -euo pipefail
IMAGE=${1:-halyard-base:bookworm}
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE already exists" >&2
  exit 0
fi
root=$(mktemp -d /var/tmp/halyard-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=bash,git,python3,ca-certificates,procps bookworm "$root" >/var/log/halyard-debootstrap.log 2>&1 \
  || { echo "debootstrap failed; see /var/log/halyard-debootstrap.log" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "built $IMAGE" >&2
