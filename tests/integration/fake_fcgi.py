"""A tiny FastCGI responder standing in for orchard-api in the nginx tests.

It speaks just enough FastCGI (one request per connection, as nginx does
without fastcgi_keep_conn) to check nginx's side of the contract in
docs/architecture.md without depending on the real api:

- DOCUMENT_URI /_auth: key "good-key" (X-API-Key or Bearer) -> 204 with
  X-Orchard-Tenant/Key/Role; no key -> 401; anything else -> 403.
- DOCUMENT_URI /_auth_agent: as /_auth for the key; then, when
  ORCHARD_ORIGINAL_URI names sandbox "box1" with a GET or HEAD, 204 with
  X-Orchard-Agent-Upstream (FakeApi.agent_upstream) and -Token
  (AGENT_TOKEN); any other sandbox -> 403 with the tenant headers and
  X-Orchard-Auth-Error, as the real api defers to its own handler.
- /status/NNN -> status NNN with the api's own JSON error body.
- anything else -> 200 with every FastCGI param and the body length, as JSON.

FakeAgent is an HTTP server on a unix socket standing in for orchard-agent:
it answers every request with its method, path and headers as JSON, 404
for paths containing "missing".
"""
import json
import os
import socket
import struct
import threading

BEGIN_REQUEST, ABORT_REQUEST, END_REQUEST, PARAMS, STDIN, STDOUT = 1, 2, 3, 4, 5, 6

GOOD_KEY = "good-key"
TENANT, KEY_ID, ROLE = "7", "3", "user"
AGENT_TOKEN = "agent-secret-token"
GOOD_BOX = "box1"


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
    """The api's two FastCGI sockets (docs/architecture.md): `path` for
    requests and `auth_path` (default path + ".auth") for nginx's auth
    subrequests, which answers only /_auth and /_auth_agent (404 else), as
    orchard-api's does. auth_sockets[i] is the socket auth_calls[i] came on."""

    def __init__(self, path, auth_path=None):
        self.path = path
        self.auth_path = auth_path or path + ".auth"
        self.auth_calls = []
        self.auth_sockets = []
        self.agent_upstream = ""
        self.socks = [self._listen(self.path), self._listen(self.auth_path)]
        self._stop = False
        self.threads = [threading.Thread(target=self._serve, args=(s, p), daemon=True)
                        for s, p in zip(self.socks, (self.path, self.auth_path))]
        for t in self.threads:
            t.start()

    @staticmethod
    def _listen(path):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(path):
            os.unlink(path)
        sock.bind(path)
        os.chmod(path, 0o666)
        sock.listen(64)
        return sock

    def close(self):
        self._stop = True
        for sock, path in zip(self.socks, (self.path, self.auth_path)):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
            if os.path.exists(path):
                os.unlink(path)

    def _serve(self, sock, path):
        while not self._stop:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn, path), daemon=True).start()

    def _handle(self, conn, path):
        try:
            raw, parts, rid = b"", [], 1
            while True:
                rtype, rid, content = _read_record(conn)
                if rtype == PARAMS:
                    raw += content
                elif rtype == STDIN:
                    if not content:
                        break
                    parts.append(content)
            body = b"".join(parts)
            params = _parse_params(raw)
            uri = params.get("DOCUMENT_URI", [""])[0]
            if path == self.auth_path and uri not in ("/_auth", "/_auth_agent"):
                status, headers, out = 404, [], b""
            else:
                if uri in ("/_auth", "/_auth_agent"):
                    self.auth_sockets.append(path)
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
        if uri == "/_auth_agent":
            self.auth_calls.append(params)
            key = one.get("HTTP_X_API_KEY", "")
            if not key:
                return 401, [], b""
            if key != GOOD_KEY:
                return 403, [], b""
            who = [("X-Orchard-Tenant", TENANT), ("X-Orchard-Key", KEY_ID), ("X-Orchard-Role", ROLE)]
            orig = one.get("ORCHARD_ORIGINAL_URI", "").split("?")[0]
            if "/sandboxes/%s/" % GOOD_BOX in orig:
                if one.get("ORCHARD_ORIGINAL_METHOD") in ("GET", "HEAD"):
                    return 204, who + [("X-Orchard-Agent-Upstream", self.agent_upstream),
                                       ("X-Orchard-Agent-Token", AGENT_TOKEN)], b""
            return 403, who + [("X-Orchard-Auth-Error", "not_found")], b""
        if uri.startswith("/status/"):
            code = int(uri[len("/status/"):])
            doc = {"detail": "from the api", "code": "api", "request_id": one.get("REQUEST_ID")}
            return code, [("Content-Type", "application/json")], json.dumps(doc).encode()
        doc = {"params": params, "body_length": len(body)}
        return 200, [("Content-Type", "application/json")], json.dumps(doc).encode()


class FakeAgent:
    """An HTTP/1.1 server on a unix socket that describes each request."""

    def __init__(self, path):
        import http.server
        import socketserver

        self.path = path
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def address_string(self):
                return "agent"

            def log_message(self, *args):
                pass

            def _answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                seen = {"method": self.command, "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body_length": len(body)}
                outer.requests.append(seen)
                status = 404 if "missing" in self.path else 200
                doc = seen if status == 200 else {"error": "no such file"}
                out = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.send_header("X-File-Size", "3")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_HEAD = do_PUT = _answer

        if os.path.exists(path):
            os.unlink(path)

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(path, Handler)
        os.chmod(path, 0o666)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        if os.path.exists(self.path):
            os.unlink(self.path)
