"""A WebSocket origin for http-front's tests (Debian's python3-websockets).

    origin.py HOST PORT

Echoes every message; a message "whoami" is answered with the request path and the
X-Forwarded-For the origin saw; "close" closes from the origin's side. Prints "ready" once
listening, then one line per connection opened ("open PATH").
"""
import asyncio
import sys

import websockets


async def handler(ws, path=None):
    path = path or getattr(ws, "path", "")
    print(f"open {path}", flush=True)
    async for msg in ws:
        if msg == "whoami":
            xff = ws.request_headers.get("X-Forwarded-For", "")
            await ws.send(f"path={path} xff={xff}")
        elif msg == "close":
            await ws.close()
        else:
            await ws.send(msg)


async def main(host, port):
    async with websockets.serve(handler, host, port, ping_interval=None):
        print("ready", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
