#!/usr/bin/env python3
"""Follow Halyard conversation events straight from NATS JetStream, in Python.

    pip install nats-py msgpack
    python3 follow_events.py --nats nats://127.0.0.1:4222 --user reader --password PASSWORD
        [--conversation ID] [--until-seq N]

With `halyard up`, the read-only role's user and password are the `reader` entry of
`<data dir>/nats-credentials.json`; it may read events and nothing else.

Prints one JSON line per event: the envelope's payload (a ConversationEvent) with the envelope's
kind. Without --conversation it follows every conversation (`halyard.events.>`). See
protocol/README.md for the format.
"""
import argparse
import asyncio
import json
import sys

import msgpack
import nats
from nats.js.api import DeliverPolicy


async def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nats", default="nats://127.0.0.1:4222")
    p.add_argument("--user", help="NATS user (the read-only `reader` role)")
    p.add_argument("--password", help="its password")
    p.add_argument("--creds", help="or a .creds file of an operator-managed account")
    p.add_argument("--conversation", help="one conversation id; default: all")
    p.add_argument("--until-seq", type=int, default=0, help="stop after this seq (with --conversation)")
    p.add_argument("--idle-timeout", type=float, default=10.0, help="stop after this long without events")
    args = p.parse_args()

    auth = {}
    if args.creds:
        auth["user_credentials"] = args.creds
    elif args.user:
        auth.update(user=args.user, password=args.password)
    nc = await nats.connect(args.nats, **auth)
    js = nc.jetstream()
    subject = f"halyard.events.{args.conversation}.*" if args.conversation else "halyard.events.>"
    # An ordered consumer: in order, no acks, recreated by the client if it falls behind.
    # Naming the stream saves a stream look-up the read-only role may not make.
    sub = await js.subscribe(subject, stream="HALYARD_EVENTS", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=args.idle_timeout)
            except nats.errors.TimeoutError:
                return 0
            envelope = msgpack.unpackb(msg.data, raw=False)
            if envelope.get("v", 0) > 1:
                print(f"unsupported envelope version {envelope['v']}", file=sys.stderr)
                return 2
            event = envelope["payload"]
            event["envelope_kind"] = envelope["kind"]
            print(json.dumps(event), flush=True)
            if args.until_seq and event["seq"] >= args.until_seq:
                return 0
    finally:
        await nc.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
