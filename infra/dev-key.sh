# Sourced by infra/up.sh: without HALYARD_API_KEYS, one development key (user `dev`, an
# administrator, as a single-user install expects), made once and kept in the data directory
# (mode 0600), so saved CLI logins and browser sessions survive a restart. Exports
# HALYARD_API_KEYS and HALYARD_ADMINS, and prints the key on every start.
if [ -z "${HALYARD_API_KEYS:-}" ]; then
  data="${HALYARD_DATA_DIR:-./.halyard}"
  mkdir -p "$data"
  keyfile="$data/dev-key"
  if [ ! -s "$keyfile" ]; then
    (umask 077; echo "dev-key-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$keyfile")
  fi
  chmod 600 "$keyfile"
  export HALYARD_API_KEYS="dev:$(cat "$keyfile")"
  export HALYARD_ADMINS="${HALYARD_ADMINS:-dev}"
  echo "No HALYARD_API_KEYS set; the development key (user dev, an administrator; kept in $keyfile): ${HALYARD_API_KEYS#dev:}" >&2
  echo "(curl -H \"Authorization: Bearer ${HALYARD_API_KEYS#dev:}\" ...)" >&2
fi
