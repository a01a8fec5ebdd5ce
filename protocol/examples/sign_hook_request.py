#!/usr/bin/env python3
"""Signs a request to a Halyard `webhook` automation's hook with the Standard Webhooks
reference library (`pip install standardwebhooks`), as any program calling the hook would.

    sign_hook_request.py SECRET MSG_ID TIMESTAMP < body

prints the three headers to send, one `name: value` a line. TIMESTAMP is in seconds since the
epoch (a request more than five minutes from Halyard's clock is refused as stale).
"""

import datetime
import sys

from standardwebhooks.webhooks import Webhook


def main() -> None:
    secret, msg_id, timestamp = sys.argv[1], sys.argv[2], int(sys.argv[3])
    body = sys.stdin.read()
    at = datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)
    signature = Webhook(secret).sign(msg_id, at, body)
    print(f"webhook-id: {msg_id}")
    print(f"webhook-timestamp: {timestamp}")
    print(f"webhook-signature: {signature}")


if __name__ == "__main__":
    main()
