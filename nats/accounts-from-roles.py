#!/usr/bin/env python3
"""Prints a nats-server `accounts` block for Halyard, one user per role of roles.json.

    python3 nats/accounts-from-roles.py > halyard-accounts.conf
    # then `include halyard-accounts.conf` in your server configuration, and set the
    # HALYARD_<ROLE>_PASSWORD variables in the server's environment (bcrypt hashes work too).

Each role gets exactly its permissions from roles.json, and every service role its own inbox
(`_INBOX_<role>.>`), as the embedded server of `halyard up` does.
"""
import json
import os
import sys

ROLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "roles.json")


def main() -> int:
    roles = json.load(open(ROLES))
    users = []
    for name, role in roles.items():
        subscribe = list(role["subscribe"])
        if name not in ("admin", "reader"):
            subscribe.append(f"_INBOX_{name}.>")
        permissions = {"publish": {"allow": role["publish"]}, "subscribe": {"allow": subscribe}}
        if role.get("allow_responses"):
            permissions["allow_responses"] = True
        users.append({
            "user": name,
            # A variable reference: the password stays out of this file.
            "password": f"$HALYARD_{name.upper()}_PASSWORD",
            "permissions": permissions,
        })
    body = json.dumps({"HALYARD": {"jetstream": "enabled", "users": users}}, indent=2)
    # nats-server reads JSON, except that a variable reference must not be quoted.
    for name in roles:
        var = f"$HALYARD_{name.upper()}_PASSWORD"
        body = body.replace(f'"{var}"', var)
    print("accounts " + body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
