"""A gateway client written with Python's `websockets` (Debian python3-websockets), not by us.

Usage: client.py URL TOKEN ROOM. Authenticates with TOKEN, joins ROOM, then prints one JSON line
per message received and, when the server closes, {"closed": CODE, "reason": REASON}.
"""
import asyncio
import json
import sys

import websockets


def say(value):
    print(json.dumps(value), flush=True)


async def main(url, token, room):
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "auth", "token": token}))
        say({"got": json.loads(await ws.recv())})
        await ws.send(json.dumps({"type": "join", "room": room}))
        say({"got": json.loads(await ws.recv())})
        try:
            while True:
                say({"got": await ws.recv()})
        except websockets.exceptions.ConnectionClosed as e:
            frame = getattr(e, "rcvd", None)
            code = frame.code if frame is not None else e.code
            reason = frame.reason if frame is not None else e.reason
            say({"closed": code, "reason": reason})


asyncio.run(main(*sys.argv[1:4]))
