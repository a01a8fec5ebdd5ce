#!/usr/bin/env python3
"""Verifies recorded Halyard webhook deliveries with the Standard Webhooks reference library.

    pip install standardwebhooks
    python3 verify_webhooks.py SECRET < deliveries.jsonl

Each input line is {"headers": {...}, "body": "..."}. Prints one line per delivery: "ok" if
the signature verifies, and whether the same delivery with one byte of the body changed is
(correctly) rejected: "tamper-rejected".
"""
import json
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

wh = Webhook(sys.argv[1])
for line in sys.stdin:
    d = json.loads(line)
    headers = d["headers"]
    body = d["body"]
    try:
        wh.verify(body, headers)
        verdict = "ok"
    except WebhookVerificationError as e:
        verdict = f"bad:{e}"
    tampered = body.replace('"seq"', '"SEQ"', 1) if '"seq"' in body else body + " "
    try:
        wh.verify(tampered, headers)
        tamper = "tamper-accepted"
    except WebhookVerificationError:
        tamper = "tamper-rejected"
    print(verdict, tamper)
