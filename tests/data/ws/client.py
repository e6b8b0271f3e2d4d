"""WebSocket clients for http-front's tests.

    client.py h1 FRONT_HOST FRONT_PORT HOST PATH [SRC] -- MSG...
    client.py h2 FRONT_HOST FRONT_PORT HOST PATH [SRC] -- MSG...
    client.py h2key ...  (as h2, the CONNECT carrying a Sec-WebSocket-Key of its own)
    client.py h2many FRONT_HOST FRONT_PORT HOST PATH SRC -- N HOLD
        (N extended CONNECTs on one HTTP/2 connection: prints "statuses S1 S2 ..." once each
        has its answer or 10 s passed ("-" for none), holds them open HOLD seconds, prints
        "done")

Connects (from SRC when given), opens a WebSocket for HOST and PATH — over HTTP/1.1 with
python3-websockets, or over HTTP/2 with RFC 8441's extended CONNECT using python3-h2 and
frames of its own — sends each MSG ("sleep:SECS" waits instead) and prints each reply on a
line "< TEXT". Prints "status N" for a refused handshake, "closed" when the server ends the
WebSocket, "timeout" when no reply comes within 10 s.
"""
import asyncio
import os
import socket
import struct
import sys
import time


def h1(front_host, port, host, path, src, msgs):
    import websockets

    async def run():
        try:
            ws = await websockets.connect(
                f"ws://{host}:{port}{path}", host=front_host, port=port,
                local_addr=(src, 0) if src else None, ping_interval=None, open_timeout=10)
        except websockets.exceptions.InvalidStatusCode as e:
            print(f"status {e.status_code}", flush=True)
            return
        print("open", flush=True)
        try:
            for m in msgs:
                if m.startswith("sleep:"):
                    await asyncio.sleep(float(m[6:]))
                    continue
                await ws.send(m)
                try:
                    print("< " + await asyncio.wait_for(ws.recv(), 10), flush=True)
                except asyncio.TimeoutError:
                    print("timeout", flush=True)
                    return
        except websockets.exceptions.ConnectionClosed:
            print("closed", flush=True)
            return
        await ws.close()

    asyncio.run(run())


def frame(text):
    """A masked client text frame."""
    data = text.encode()
    mask = os.urandom(4)
    head = bytes([0x81])
    n = len(data)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def parse(buf):
    """(opcode, payload, rest) of the first whole server frame in buf, or None."""
    if len(buf) < 2:
        return None
    op, n = buf[0] & 0x0F, buf[1] & 0x7F
    i = 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, i = struct.unpack("!H", buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, i = struct.unpack("!Q", buf[2:10])[0], 10
    if len(buf) < i + n:
        return None
    return op, buf[i:i + n], buf[i + n:]


def h2(front_host, port, host, path, src, msgs, key=False):
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings

    s = socket.socket()
    if src:
        s.bind((src, 0))
    s.connect((front_host, port))
    s.settimeout(10)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    enabled = False
    while not enabled:
        data = s.recv(65536)
        if not data:
            print("closed", flush=True)
            return
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.RemoteSettingsChanged):
                v = ev.changed_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL)
                enabled = bool(v and v.new_value == 1)
        s.sendall(c.data_to_send())
        if not enabled:
            print("no extended connect", flush=True)
            return
    sid = c.get_next_available_stream_id()
    extra = [("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")] if key else []
    c.send_headers(sid, [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"),
                         (":path", path), (":authority", host), ("sec-websocket-version", "13")]
                   + extra)
    s.sendall(c.data_to_send())
    buf = b""
    status = None
    ended = False

    def pump():
        nonlocal buf, status, ended
        try:
            data = s.recv(65536)
        except socket.timeout:
            return "timeout"
        except OSError:
            ended = True
            return "closed"
        if not data:
            ended = True
            return "closed"
        try:
            events = c.receive_data(data)
        except Exception:
            ended = True
            return "closed"
        for ev in events:
            if isinstance(ev, h2.events.ResponseReceived):
                status = int(dict(ev.headers)[":status"])
            elif isinstance(ev, h2.events.DataReceived):
                buf += ev.data
                c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset, h2.events.ConnectionTerminated)):
                ended = True
        try:
            s.sendall(c.data_to_send())
        except OSError:
            ended = True
            return "closed"
        return None

    while status is None:
        r = pump()
        if r:
            print(r, flush=True)
            return
    if status != 200:
        print(f"status {status}", flush=True)
        return
    print("open", flush=True)
    for m in msgs:
        if m.startswith("sleep:"):
            time.sleep(float(m[6:]))
            continue
        try:
            c.send_data(sid, frame(m))
            s.sendall(c.data_to_send())
        except Exception:
            print("closed", flush=True)
            return
        while True:
            got = parse(buf)
            if got:
                op, payload, buf = got
                if op == 8:
                    print("closed", flush=True)
                    return
                print("< " + payload.decode(), flush=True)
                break
            if ended:
                print("closed", flush=True)
                return
            r = pump()
            if r:
                print(r, flush=True)
                return


def h2many(front_host, port, host, path, src, n, hold):
    import h2.config
    import h2.connection
    import h2.events

    s = socket.socket()
    if src:
        s.bind((src, 0))
    s.connect((front_host, port))
    s.settimeout(1)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    statuses = {}
    sids = []
    end = time.time() + 10

    def pump():
        try:
            data = s.recv(65536)
        except socket.timeout:
            return True
        except OSError:
            return False
        if not data:
            return False
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                statuses[ev.stream_id] = dict(ev.headers)[":status"]
            elif isinstance(ev, h2.events.StreamReset):
                statuses.setdefault(ev.stream_id, "reset")
        s.sendall(c.data_to_send())
        return True

    # The server's SETTINGS first (extended CONNECT must be enabled by them).
    pump()
    for _ in range(n):
        sid = c.get_next_available_stream_id()
        sids.append(sid)
        c.send_headers(sid, [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"),
                             (":path", path), (":authority", host), ("sec-websocket-version", "13")])
    s.sendall(c.data_to_send())
    while len(statuses) < n and time.time() < end:
        if not pump():
            break
    print("statuses " + " ".join(statuses.get(i, "-") for i in sids), flush=True)
    until = time.time() + hold
    while time.time() < until:
        if not pump():
            break
    print("done", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    cut = args.index("--")
    head, msgs = args[:cut], args[cut + 1:]
    mode, front_host, port, host, path = head[:5]
    src = head[5] if len(head) > 5 else None
    if mode == "h1":
        h1(front_host, int(port), host, path, src, msgs)
    elif mode == "h2many":
        h2many(front_host, int(port), host, path, src, int(msgs[0]), float(msgs[1]))
    else:
        h2(front_host, int(port), host, path, src, msgs, key=(mode == "h2key"))
