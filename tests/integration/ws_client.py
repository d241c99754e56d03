"""A minimal RFC 6455 client for the tests that need the protocol as it is
on the wire: the handshake's answer whatever it is (status, every header,
the JSON body of a refusal), frames of any opcode, fragmented or (wrongly)
unmasked. Over the agent's unix socket (unix) or through the stack's TLS
front (tls). Tests that only talk PTY use python3-websocket instead
(test_pty_clients.py, test_key_revoke.py).
"""
import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import time
from urllib.parse import urlparse

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Closed(Exception):
    def __init__(self, code, reason=""):
        super().__init__("closed %s %r" % (code, reason))
        self.code, self.reason = code, reason


def accept_of(key):
    """The Sec-WebSocket-Accept a server must answer to key."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def frame(opcode, payload, fin=True, masked=True, length=None):
    """One frame's bytes; length (when not None) is the length the header
    claims, whatever the payload is."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | opcode])
    mbit = 0x80 if masked else 0
    if n < 126:
        head += bytes([mbit | n])
    elif n < 65536:
        head += bytes([mbit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack("!Q", n)
    if not masked:
        return head + payload
    mask, k = os.urandom(4), len(payload)
    if k < 4096:
        return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + (int.from_bytes(payload, "big") ^
                          int.from_bytes((mask * (k // 4 + 1))[:k], "big")).to_bytes(k, "big")


class WS:
    """One client connection on a connected socket: the handshake's answer
    (status, headers, buf holding what followed it), then frames."""

    def __init__(self, sock, path, headers=None, protocols=None, upgrade=True):
        self.s = sock
        self.key = base64.b64encode(os.urandom(16)).decode()
        req = "GET %s HTTP/1.1\r\nHost: localhost\r\n" % path
        if upgrade:
            req += ("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                    "Sec-WebSocket-Version: 13\r\n" % self.key)
        if protocols:
            req += "Sec-WebSocket-Protocol: %s\r\n" % ", ".join(protocols)
        for name, value in (headers or {}).items():
            req += "%s: %s\r\n" % (name, value)
        if not upgrade:
            req += "Connection: close\r\n"
        self.s.sendall((req + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.s.recv(4096)
            if not chunk:
                raise ConnectionError("connection closed during the handshake: %r" % self.buf)
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for line in lines[1:]:
            name, value = line.split(":", 1)
            self.headers.setdefault(name.strip().lower(), []).append(value.strip())
        if self.status == 101:
            assert self.header("sec-websocket-accept") == accept_of(self.key), self.headers
        self.received = 0          # stdout bytes decoded so far
        self.close_code = None

    def header(self, name):
        """The one value of a header of the answer, None when absent."""
        v = self.headers.get(name.lower())
        assert v is None or len(v) == 1, (name, v)
        return v[0] if v else None

    def body(self):
        """The JSON body of a non-101 answer."""
        n = int(self.header("content-length"))
        while len(self.buf) < n:
            chunk = self.s.recv(4096)
            if not chunk:
                break
            self.buf += chunk
        return json.loads(self.buf[:n])

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                raise Closed(None, "eof")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send_frame(self, opcode, payload, fin=True, masked=True):
        self.s.sendall(frame(opcode, payload, fin, masked))

    def send(self, obj):
        self.send_frame(0x1, json.dumps(obj).encode())

    def stdin(self, text):
        self.send({"type": "stdin", "data": base64.b64encode(text.encode()).decode()})

    def recv_frame(self):
        """(opcode, payload) of the next whole message, or of a ping (answered)
        or pong; raises Closed (after answering it) on a close frame."""
        data, first_op = b"", None
        while True:
            b0, b1 = self._read(2)
            op, n = b0 & 0x0F, b1 & 0x7F
            assert not b1 & 0x80, "server frames must not be masked"
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            if op == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                self.close_code = code
                try:
                    self.send_frame(0x8, payload[:2])
                except OSError:
                    pass
                raise Closed(code, payload[2:].decode(errors="replace"))
            if op in (0x9, 0xA):
                if op == 0x9:
                    self.send_frame(0xA, payload)
                return op, payload
            if op != 0:
                first_op = op
            data += payload
            if b0 & 0x80:
                return first_op, data

    def recv(self):
        """The next JSON message (pings and pongs skipped)."""
        while True:
            op, payload = self.recv_frame()
            if op in (0x1, 0x2):
                msg = json.loads(payload)
                if msg.get("type") == "stdout":
                    self.received += len(base64.b64decode(msg["data"]))
                return msg

    def read_until(self, text, seconds=10):
        """stdout text until `text` appears; returns it all."""
        out, end = "", time.time() + seconds
        while text not in out:
            assert time.time() < end, "no %r in %r" % (text, out)
            m = self.recv()
            if m["type"] == "stdout":
                out += base64.b64decode(m["data"]).decode(errors="replace")
            else:
                assert m["type"] != "exit", "exited before %r: %r" % (text, out)
        return out

    def until_exit(self, seconds=10):
        """(stdout text, exit code) up to the exit frame, then the close code."""
        out, end = "", time.time() + seconds
        while True:
            assert time.time() < end
            m = self.recv()
            if m["type"] == "stdout":
                out += base64.b64decode(m["data"]).decode(errors="replace")
            elif m["type"] == "exit":
                return out, m["code"]

    def expect_close(self, seconds=10):
        """The close code, skipping frames before it; returns (code, frames)."""
        frames, end = [], time.time() + seconds
        self.s.settimeout(seconds)
        try:
            while time.time() < end:
                frames.append(self.recv())
        except Closed as c:
            return c.code, frames
        raise AssertionError("not closed: %r" % frames)

    def drop(self):
        """Vanish without a close frame (a lost connection)."""
        self.s.close()

    def close(self):
        """A close frame (on an upgraded connection), then the socket."""
        if self.status == 101:
            try:
                self.send_frame(0x8, struct.pack("!H", 1000))
            except OSError:
                pass
        try:
            self.s.close()
        except OSError:
            pass


def unix(sock_path, path, timeout=10, **kw):
    """A WS on the agent's unix socket."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    return WS(s, path, **kw)


def tls(stack, path, timeout=20, **kw):
    """A WS through the stack's TLS front (nginx), checked against its CA."""
    u = urlparse(stack.url)
    ctx = ssl.create_default_context(cafile=stack.cacert)
    raw = socket.create_connection((u.hostname, u.port), timeout=timeout)
    return WS(ctx.wrap_socket(raw, server_hostname="localhost"), path, **kw)
