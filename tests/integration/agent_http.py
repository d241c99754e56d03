"""A small client for bin/orchard-agent over a unix socket, shared by the
agent's test files: start/stop an agent with a token file and talk HTTP to
it (JSON or raw bytes)."""
import http.client
import json
import os
import signal
import socket
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENT = os.environ.get("ORCHARD_AGENT_BIN") or os.path.join(REPO, "bin", "orchard-agent")
TOKEN = "t0ken-for-agent-tests"
OWN = object()   # request(token=OWN): the agent's own token


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix socket."""

    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Agent:
    def __init__(self, sock, token=TOKEN, pid=None):
        self.sock = sock
        self.token = token
        self.pid = pid

    def connection(self, timeout=60):
        return UnixHTTPConnection(self.sock, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=False, timeout=120,
                encode_chunked=False, token=OWN):
        """(status, JSON body (or bytes with raw=True; None when empty), response).
        token: another bearer token, or None for none."""
        token = self.token if token is OWN else token
        h = {"Authorization": "Bearer " + token} if token else {}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        c = self.connection(timeout)
        try:
            try:
                c.request(method, path, body=body, headers=h, encode_chunked=encode_chunked)
                r = c.getresponse()
            except (BrokenPipeError, ConnectionResetError):
                # The agent answered before the body was sent (a 413 on the
                # headers) and closed; on a unix socket its reply stays
                # readable after the close.
                if c.sock is None:
                    raise
                r = http.client.HTTPResponse(c.sock, method=method)
                r.begin()
            data = r.read()
            if raw:
                return r.status, data, r
            return r.status, (json.loads(data) if data else None), r
        finally:
            c.close()

    def exec(self, timeout=60, **fields):
        status, body = self.request("POST", "/exec", fields, timeout=timeout)[:2]
        assert status == 200, body
        return body

    def cancel(self, job_id):
        return self.request("POST", "/exec/cancel", {"job_id": job_id})


def wait_for_health(agent, proc, deadline_s=10):
    """The body of the agent's first 200 to GET /health; AssertionError when
    proc exits first or deadline_s pass."""
    end = time.time() + deadline_s
    while time.time() < end:
        if proc.poll() is not None:
            raise AssertionError("agent exited with %s" % proc.returncode)
        try:
            status, body, _ = agent.request("GET", "/health", timeout=2)
            if status == 200:
                return body
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("agent did not answer /health")


def start_agent(tmp, extra_env=None, token=TOKEN, sock=None, log_level="info"):
    """bin/orchard-agent on sock (default tmp/agent.sock), logging to
    tmp/agent.log; (process, Agent) once it answers /health."""
    if not os.access(AGENT, os.X_OK):
        raise AssertionError("%s is missing: run `make bin/orchard-agent`" % AGENT)
    sock = sock or os.path.join(tmp, "agent.sock")
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    env = dict(os.environ)
    env["ORCHARD_LOG_LEVEL"] = log_level
    env.update(extra_env or {})
    with open(os.path.join(tmp, "agent.log"), "ab") as log:
        proc = subprocess.Popen([AGENT, "--listen", "unix:" + sock, "--token-file", token_file],
                                env=env, stdout=log, stderr=log)
    agent = Agent(sock, token, proc.pid)
    try:
        wait_for_health(agent, proc)
    except AssertionError:
        proc.kill()
        proc.wait()
        raise
    return proc, agent


def stop_agent(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
