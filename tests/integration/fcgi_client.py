"""A minimal FastCGI client: requests as nginx sends them.

Tests use it to speak to an orchard-api socket directly, as nginx would
after its auth_request (the ORCHARD_TENANT/KEY/ROLE params), e.g. to reach
one particular replica.
"""
import socket
import struct

from fake_fcgi import _read_record, _record

BEGIN_REQUEST, END_REQUEST, PARAMS, STDIN, STDOUT = 1, 3, 4, 5, 6
RESPONDER = 1


def _nv_len(n):
    return bytes([n]) if n < 128 else struct.pack("!I", n | 0x80000000)


def _stream(rtype, data):
    """A FastCGI stream: its records, then the empty one that ends it."""
    return (_record(rtype, 1, data) if data else b"") + _record(rtype, 1, b"")


def request(s, params, body=b"", keep=False):
    """(status, headers, body) of one FastCGI request on the connected socket
    s; keep sets FCGI_KEEP_CONN, as nginx's fastcgi_keep_conn does, so that
    the connection can carry the next request."""
    pairs = b"".join(_nv_len(len(k.encode())) + _nv_len(len(v.encode())) + k.encode() + v.encode()
                     for k, v in params.items())
    out = _record(BEGIN_REQUEST, 1, struct.pack("!HB5x", RESPONDER, 1 if keep else 0))
    out += _stream(PARAMS, pairs) + _stream(STDIN, body)
    data = b""
    s.sendall(out)
    while True:
        rtype, _, content = _read_record(s)
        if rtype == STDOUT:
            data += content
        elif rtype == END_REQUEST:
            break
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines if ": " in line)
    return int(headers.get("Status", "200").split()[0]), headers, rest


def call(sock_path, params, body=b"", timeout=60):
    """(status, headers, body) of one FastCGI request to sock_path."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        return request(s, params, body)
