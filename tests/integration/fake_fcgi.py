"""A tiny FastCGI responder standing in for orchard-api in the nginx tests.

It speaks just enough FastCGI (one request per connection, as nginx does
without fastcgi_keep_conn) to check nginx's side of the contract in
docs/architecture.md without depending on the real api:

- DOCUMENT_URI /_auth: key "good-key" (X-API-Key or Bearer) -> 204 with
  X-Orchard-Tenant/Key/Role; no key -> 401; anything else -> 403.
- /status/NNN -> status NNN with the api's own JSON error body.
- anything else -> 200 with every FastCGI param and the body length, as JSON.
"""
import json
import os
import socket
import struct
import threading

BEGIN_REQUEST, ABORT_REQUEST, END_REQUEST, PARAMS, STDIN, STDOUT = 1, 2, 3, 4, 5, 6

GOOD_KEY = "good-key"
TENANT, KEY_ID, ROLE = "7", "3", "user"


def _read_exact(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _read_record(conn):
    hdr = _read_exact(conn, 8)
    _ver, rtype, rid, clen, plen, _ = struct.unpack("!BBHHBB", hdr)
    content = _read_exact(conn, clen) if clen else b""
    if plen:
        _read_exact(conn, plen)
    return rtype, rid, content


def _parse_params(data):
    params, i = {}, 0

    def length():
        nonlocal i
        b = data[i]
        if b < 128:
            i += 1
            return b
        n = struct.unpack("!I", data[i:i + 4])[0] & 0x7FFFFFFF
        i += 4
        return n

    while i < len(data):
        nl = length()
        vl = length()
        name = data[i:i + nl].decode("latin-1")
        i += nl
        value = data[i:i + vl].decode("latin-1")
        i += vl
        # Keep every occurrence: a param sent twice is a bug we want to see.
        params.setdefault(name, []).append(value)
    return params


def _record(rtype, rid, content):
    out = b""
    for off in range(0, max(len(content), 1), 65535):
        part = content[off:off + 65535]
        out += struct.pack("!BBHHBB", 1, rtype, rid, len(part), 0, 0) + part
    return out


class FakeApi:
    def __init__(self, path):
        self.path = path
        self.auth_calls = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(path):
            os.unlink(path)
        self.sock.bind(path)
        os.chmod(path, 0o666)
        self.sock.listen(64)
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self):
        self._stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if os.path.exists(self.path):
            os.unlink(self.path)

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            raw, body, rid = b"", b"", 1
            while True:
                rtype, rid, content = _read_record(conn)
                if rtype == PARAMS:
                    raw += content
                elif rtype == STDIN:
                    if not content:
                        break
                    body += content
            params = _parse_params(raw)
            status, headers, out = self._respond(params, body)
            head = "Status: %d\r\n" % status
            for k, v in headers:
                head += "%s: %s\r\n" % (k, v)
            payload = head.encode() + b"\r\n" + out
            conn.sendall(_record(STDOUT, rid, payload) + _record(STDOUT, rid, b"")
                         + struct.pack("!BBHHBB", 1, END_REQUEST, rid, 8, 0, 0)
                         + struct.pack("!IB3x", 0, 0))
        except (EOFError, OSError):
            pass
        finally:
            conn.close()

    def _respond(self, params, body):
        one = {k: v[0] for k, v in params.items()}
        uri = one.get("DOCUMENT_URI", "")
        if uri == "/_auth":
            self.auth_calls.append(params)
            key = one.get("HTTP_X_API_KEY", "")
            authz = one.get("HTTP_AUTHORIZATION", "")
            if not key and authz.startswith("Bearer "):
                key = authz[len("Bearer "):]
            if not key:
                return 401, [], b""
            if key != GOOD_KEY:
                return 403, [], b""
            return 204, [("X-Orchard-Tenant", TENANT), ("X-Orchard-Key", KEY_ID),
                         ("X-Orchard-Role", ROLE)], b""
        if uri.startswith("/status/"):
            code = int(uri[len("/status/"):])
            doc = {"detail": "from the api", "code": "api", "request_id": one.get("REQUEST_ID")}
            return code, [("Content-Type", "application/json")], json.dumps(doc).encode()
        doc = {"params": params, "body_length": len(body)}
        return 200, [("Content-Type", "application/json")], json.dumps(doc).encode()
