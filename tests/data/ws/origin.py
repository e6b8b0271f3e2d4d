"""A WebSocket origin for http-front's tests (Debian's python3-websockets).

    origin.py HOST PORT

Echoes every message; a message "whoami" is answered with the request path and the
X-Forwarded-For the origin saw; "close" closes from the origin's side. A path starting
/plain200 is answered 200 without an upgrade, /plainbig 200 with 100 KiB, /lying 403 with a
Content-Length of 1000 and 5 bytes before the close. Prints "ready" once
listening, then one line per connection opened ("open PATH").
"""
import asyncio
import http
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


def process_request(a, b):
    """A path starting /plain200 is answered 200 without upgrading (either API of websockets:
    legacy (path, headers) or new (connection, request))."""
    path = getattr(b, "path", None) or (a if isinstance(a, str) else "")
    if path.startswith("/lying"):
        lying = [("Content-Length", "1000"), ("Connection", "close")]
        if hasattr(a, "respond"):
            from websockets.datastructures import Headers
            from websockets.http11 import Response
            return Response(403, "Forbidden", Headers(lying), b"short")
        return (http.HTTPStatus.FORBIDDEN, lying, b"short")
    if path.startswith("/plainbig"):
        text = "x" * 102400
    elif path.startswith("/plain200"):
        text = "plain\n"
    else:
        return None
    if hasattr(a, "respond"):
        return a.respond(http.HTTPStatus.OK, text)
    return (http.HTTPStatus.OK, [], text.encode())


async def main(host, port):
    async with websockets.serve(handler, host, port, ping_interval=None,
                                process_request=process_request):
        print("ready", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
