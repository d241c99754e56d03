"""orchardctl, black-box: the binary run as a user would (docs/cli.md, issue 7).

Three layers:
- no server: help, completion, usage errors, config contexts and the
  config file's permissions, each with a fresh HOME;
- a fake HTTP server in this process (fake_api): retries, pagination,
  configuration precedence and servers that lack routes, which the real
  stack cannot be made to show on demand;
- the real stack (the `stack` and `sandbox` fixtures of conftest.py).
"""
import http.server
import json
import os
import pty
import queue
import re
import select
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
import time

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# ORCHARD_TEST_ORCHARDCTL tries another build (e.g. a sanitizer one) against the same tests.
CTL = os.environ.get("ORCHARD_TEST_ORCHARDCTL") or os.path.join(REPO, "bin", "orchardctl")
COMMANDS = ["create", "ls", "get", "describe", "wait", "exec", "shell", "cp", "files", "patch", "jobs",
            "trajectory", "replay", "rm", "checkpoint", "fork", "pause", "resume", "heartbeat", "stats", "keys", "tenants", "config", "completion",
            "version", "help"]
SUBCOMMANDS = {"files": ["ls", "cat", "rm", "mkdir"],
               "patch": ["apply", "diff", "reset"],
               "jobs": ["ls", "get", "wait", "logs", "cancel"],
               "trajectory": ["export"],
               "checkpoint": ["create", "ls", "get", "rm"],
               "keys": ["create", "ls", "revoke"],
               "tenants": ["ls", "create", "set", "delete"],
               "config": ["set-context", "use-context", "get-contexts", "current-context",
                          "view", "delete-context"]}
KEY = "orch_0123456789ab_" + "f" * 40


@pytest.fixture
def home():
    d = tempfile.mkdtemp(prefix="cli-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def clean_env(home, **extra):
    """Nothing from the caller's configuration: only PATH and a fresh HOME."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8"}
    env.update({k: v for k, v in os.environ.items() if k in ("ASAN_OPTIONS", "UBSAN_OPTIONS")})
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def ctl(*args, home, input=None, timeout=60, **env):
    return subprocess.run([CTL] + list(args), env=clean_env(home, **env), input=input,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)


def config_file(home):
    return os.path.join(home, ".config", "orchard", "config")


# ---- help, usage errors, completion ----------------------------------------

def test_help_lists_every_command_and_each_has_usage_and_examples(home):
    r = ctl("help", home=home)
    assert r.returncode == 0
    for name in COMMANDS:
        assert re.search(r"^  %s\s" % re.escape(name), r.stdout, re.M), name
    for group, subs in SUBCOMMANDS.items():
        for sub in [None] + subs:
            args = [group] + ([sub] if sub else [])
            h = ctl("help", *args, home=home)
            assert h.returncode == 0, h.stderr
            assert h.stdout.startswith("usage: orchardctl %s" % " ".join(args)), h.stdout
            examples = h.stdout.split("\nExamples:\n")[1]
            assert examples.startswith("  ") and "orchardctl %s" % " ".join(args) in examples, args
            assert ctl(*args, "--help", home=home).stdout == h.stdout
    for name in COMMANDS:
        h = ctl("help", name, home=home)
        assert h.returncode == 0 and "usage: orchardctl" in h.stdout and "Examples:" in h.stdout


@pytest.mark.parametrize("args, message", [
    ([], "missing command"),
    (["frobnicate"], 'unknown command "frobnicate"'),
    (["create", "--cpu", "lots"], "--cpu wants"),
    (["create", "--ttl", "5x"], "--ttl wants a duration"),
    (["create", "--label", "novalue"], "--label wants K=V"),
    (["create", "--name", "Not_A_Label"], "is not a DNS label"),
    (["exec", "sb1"], "expected a command after the ID"),
    (["exec", "sb1", "--timeout", "0", "--", "true"], "--timeout wants"),
    (["ls", "-o", "xml"], "-o wants table, wide, json, yaml or jsonpath=EXPR"),
    (["get", "sb1", "-o", "jsonpath=x"], "-o jsonpath= takes"),
    (["ls", "-l", "=x"], "--label wants K=V"),
    (["rm"], "expected at least one ID"),
    (["rm", "-l", "a=b"], "--label selects with --all"),
    (["rm", "--all", "sb1"], "IDs or --all, not both"),
    (["jobs"], "jobs: missing subcommand"),
    (["jobs", "frob"], 'unknown subcommand "frob"'),
    (["jobs", "wait", "j1", "--timeout", "soon"], "--timeout wants"),
    (["config", "set-context", "bad name"], "context name is"),
    (["config", "set-context", "dev", "--url", "ftp://x"], "--url must start with"),
    (["completion", "tcsh"], 'unknown shell "tcsh" (bash, zsh or fish)'),
    (["help", "nosuch"], 'unknown command "nosuch"'),
    (["exec", "-t", "--detach", "sb1", "--", "sh"], "no --detach or --timeout"),
    (["cp", "sb1:/x"], "expected SRC and DST"),
    (["cp", "a", "b"], "one of SRC and DST must be ID:PATH"),
    (["cp", "sb1:/a", "sb2:/b"], "copy through a local directory"),
    (["cp", "--tar", "dir", "sb1:/x"], "--tar is for -"),
    (["files"], "files: missing subcommand"),
    (["files", "ls"], "expected ID"),
    (["files", "cat", "sb1"], "at least one PATH"),
    (["files", "mkdir", "-m", "rwx", "sb1", "d"], "--mode wants octal"),
    (["patch", "apply", "sb1", "a.patch", "b.patch"], "at most one FILE"),
    (["patch", "diff", "sb1", "-o", "table"], "-o wants json, yaml or jsonpath=EXPR"),
    (["shell"], "expected a sandbox ID"),
    (["shell", "sb1", "-e", "novalue"], "-e wants K=V"),
    (["keys", "revoke"], "expected at least one KEY"),
    (["tenants", "create", "Bad_Name"], "expected one NAME"),
    (["tenants", "set", "t1"], "nothing to change"),
    (["tenants", "set", "t1", "--max-cpu", "lots"], 'invalid --max-cpu "lots"'),
])
def test_bad_usage_exits_125_with_a_message_and_usage(home, args, message):
    # A server is configured that cannot be reached: no "cannot reach" proves nothing was sent.
    r = ctl(*args, home=home, ORCHARD_URL="http://127.0.0.1:1")
    assert r.returncode == 125, (r.returncode, r.stderr)
    assert message in r.stderr and "cannot reach" not in r.stderr, r.stderr
    assert "usage: orchardctl" in r.stderr
    assert r.stdout == ""


def test_no_server_configured_says_how_to_configure_one(home):
    r = ctl("ls", home=home)
    assert r.returncode == 125
    assert "ORCHARD_URL" in r.stderr and "config set-context" in r.stderr


def bash_complete(home, words, extra_path=None):
    """COMPREPLY of the generated bash completion for the words typed so far."""
    script = ctl("completion", "bash", home=home).stdout
    path = os.path.join(home, "completion.bash")
    with open(path, "w") as f:
        f.write(script)
    line = ("source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _orchardctl; printf '%%s\\n' \"${COMPREPLY[@]}\""
            % (path, " ".join("'%s'" % w for w in words), len(words) - 1))
    env = clean_env(home, PATH=os.path.dirname(CTL) + ":" + os.environ.get("PATH", ""))
    r = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_bash_completion_knows_commands_subcommands_options_and_contexts(home):
    script = ctl("completion", "bash", home=home)
    assert script.returncode == 0
    assert subprocess.run(["bash", "-n"], input=script.stdout, text=True).returncode == 0
    assert bash_complete(home, ["orchardctl", ""]) == sorted(COMMANDS, key=COMMANDS.index)
    assert bash_complete(home, ["orchardctl", "ex"]) == ["exec"]
    assert bash_complete(home, ["orchardctl", "jobs", "w"]) == ["wait"]
    assert bash_complete(home, ["orchardctl", "--context", "x", "config", "s"]) == ["set-context"]
    assert "--label" in bash_complete(home, ["orchardctl", "create", "--ttl", "1h", "--l"])
    assert bash_complete(home, ["orchardctl", "exec", "sb", "--det"]) == ["--detach"]
    assert bash_complete(home, ["orchardctl", "ls", "-o", "w"]) == ["wide"]
    for name in ("alpha", "beta"):
        assert ctl("config", "set-context", name, "--url", "https://x.test", home=home).returncode == 0
    assert bash_complete(home, ["orchardctl", "config", "use-context", ""]) == ["alpha", "beta"]


def test_zsh_completion_is_generated_from_the_same_table(home):
    r = ctl("completion", "zsh", home=home)
    assert r.returncode == 0 and r.stdout.startswith("#compdef orchardctl\n")
    for name in COMMANDS:
        assert "'%s:" % name in r.stdout, name
    assert "set-context use-context" in r.stdout and "--idle-timeout" in r.stdout
    if shutil.which("zsh"):
        assert subprocess.run(["zsh", "-n"], input=r.stdout, text=True).returncode == 0


def fish_complete(home, line):
    """What fish offers for the command line typed so far (fish's own `complete -C`)."""
    script = os.path.join(home, "orchardctl.fish")
    with open(script, "w") as f:
        f.write(ctl("completion", "fish", home=home).stdout)
    env = clean_env(home, PATH=os.path.dirname(CTL) + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
    r = subprocess.run(["fish", "--no-config", "-c", "source %s; complete -C %s" % (script, shlex.quote(line))],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return [l.split("\t")[0] for l in r.stdout.splitlines()]


def test_fish_completion_parses_and_completes(home):
    """fish is in scripts/deps.sh: fish -n parses the script, and fish itself completes from it."""
    r = ctl("completion", "fish", home=home)
    assert r.returncode == 0 and r.stdout.startswith("# fish completion for orchardctl")
    assert subprocess.run(["fish", "--no-config", "-n"], input=r.stdout, text=True).returncode == 0
    assert fish_complete(home, "orchardctl ") == sorted(COMMANDS)
    assert fish_complete(home, "orchardctl ex") == ["exec"]
    assert fish_complete(home, "orchardctl jobs w") == ["wait"]
    assert fish_complete(home, "orchardctl tenants ") == sorted(SUBCOMMANDS["tenants"])
    assert fish_complete(home, "orchardctl --context x config s") == ["set-context"]
    assert fish_complete(home, "orchardctl exec sb --det") == ["--detach"]
    assert fish_complete(home, "orchardctl ls -o ") == ["json", "jsonpath=", "table", "wide", "yaml"]
    assert "--idle-timeout" in fish_complete(home, "orchardctl create --")
    assert fish_complete(home, "orchardctl completion ") == ["bash", "fish", "zsh"]
    for name in ("alpha", "beta"):
        assert ctl("config", "set-context", name, "--url", "https://x.test", home=home).returncode == 0
    assert fish_complete(home, "orchardctl config use-context ") == ["alpha", "beta"]


def test_docs_reference_is_the_generated_help(home):
    r = ctl("help", "--markdown", home=home)
    assert r.returncode == 0
    with open(os.path.join(REPO, "docs", "cli.md")) as f:
        doc = f.read()
    assert r.stdout in doc, "docs/cli.md is stale: paste `orchardctl help --markdown` into it"


# ---- config contexts and the config file -----------------------------------

def test_set_context_creates_a_private_file_and_the_first_context_is_current(home):
    r = ctl("config", "set-context", "dev", "--url", "https://127.0.0.1:8443", "--api-key", KEY,
            home=home)
    assert r.returncode == 0, r.stderr
    path = config_file(home)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    data = json.load(open(path))
    assert data == {"contexts": {"dev": {"url": "https://127.0.0.1:8443", "api-key": KEY}},
                    "current-context": "dev"}
    assert ctl("config", "current-context", home=home).stdout == "dev\n"
    # A second context does not take over; use-context switches.
    assert ctl("config", "set-context", "prod", "--url", "https://prod.test", home=home).returncode == 0
    assert ctl("config", "current-context", home=home).stdout == "dev\n"
    r = ctl("config", "get-contexts", home=home)
    assert re.search(r"^\*\s+dev\s+https://127.0.0.1:8443", r.stdout, re.M), r.stdout
    assert re.search(r"^\s+prod\s+https://prod.test", r.stdout, re.M), r.stdout
    assert ctl("config", "use-context", "prod", home=home).returncode == 0
    assert ctl("config", "current-context", home=home).stdout == "prod\n"
    r = ctl("config", "use-context", "nosuch", home=home)
    assert r.returncode == 125 and 'no context "nosuch"' in r.stderr
    assert ctl("config", "delete-context", "prod", home=home).returncode == 0
    r = ctl("config", "current-context", home=home)
    assert r.returncode == 125 and "no current context" in r.stderr
    assert ctl("config", "get-contexts", "-q", home=home).stdout == "dev\n"


def test_view_masks_keys_and_raw_shows_them(home):
    ctl("config", "set-context", "dev", "--url", "https://a.test", "--api-key", KEY, home=home)
    ctl("config", "set-context", "odd", "--url", "https://b.test", "--api-key", "s3cret", home=home)
    view = ctl("config", "view", home=home)
    assert view.returncode == 0
    contexts = json.loads(view.stdout)["contexts"]
    assert contexts["dev"]["api-key"] == "orch_0123456789ab_****"
    assert contexts["odd"]["api-key"] == "****"
    assert KEY not in view.stdout and "s3cret" not in view.stdout
    raw = json.loads(ctl("config", "view", "--raw", home=home).stdout)
    assert raw["contexts"]["dev"]["api-key"] == KEY


def test_api_key_from_stdin_and_cacert_stored_absolute(home):
    ca = os.path.join(home, "ca.crt")
    open(ca, "w").close()
    r = subprocess.run([CTL, "config", "set-context", "dev", "--api-key", "-", "--cacert", "ca.crt"],
                       env=clean_env(home), cwd=home, input=KEY + "\n", capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    ctx = json.load(open(config_file(home)))["contexts"]["dev"]
    assert ctx == {"api-key": KEY, "cacert": ca}


def test_xdg_config_home_and_orchard_config_choose_the_file(home):
    xdg = os.path.join(home, "xdg")
    r = ctl("config", "set-context", "x", "--url", "https://x.test", home=home, XDG_CONFIG_HOME=xdg)
    assert r.returncode == 0
    assert os.path.exists(os.path.join(xdg, "orchard", "config"))
    assert not os.path.exists(config_file(home))
    elsewhere = os.path.join(home, "a", "b", "orchard.json")
    r = ctl("config", "set-context", "y", "--url", "https://y.test", home=home, ORCHARD_CONFIG=elsewhere)
    assert r.returncode == 0 and stat.S_IMODE(os.stat(elsewhere).st_mode) == 0o600
    assert ctl("config", "get-contexts", "-q", home=home, ORCHARD_CONFIG=elsewhere).stdout == "y\n"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_config_file_readable_by_others_is_refused_with_the_fix(home, mode):
    ctl("config", "set-context", "dev", "--url", "http://127.0.0.1:1", "--api-key", KEY, home=home)
    path = config_file(home)
    os.chmod(path, mode)
    for args in (["ls"], ["config", "view"], ["config", "set-context", "dev", "--url", "https://x.test"]):
        r = ctl(*args, home=home)
        assert r.returncode == 125, (args, r.stderr)
        assert "chmod 600 '%s'" % path in r.stderr, r.stderr
    assert json.load(open(path))["contexts"]["dev"]["url"] == "http://127.0.0.1:1"  # unchanged
    os.chmod(path, 0o600)
    assert ctl("config", "view", home=home).returncode == 0


def test_broken_config_file_is_reported_with_its_path(home):
    path = config_file(home)
    os.makedirs(os.path.dirname(path))
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write('{"contexts": [1, 2]}')
    r = ctl("ls", home=home)
    assert r.returncode == 125 and path in r.stderr and "not valid" in r.stderr


# ---- a fake API in this process --------------------------------------------

class FakeAPI(http.server.ThreadingHTTPServer):
    """Answers with respond(request, n) -> (status, headers, body), or None
    to drop the connection unanswered; records every request."""

    daemon_threads = True

    def __init__(self, respond):
        self.respond = respond
        self.requests = []
        self.lock = threading.Lock()
        for port in range(18750, 18760):
            try:
                super().__init__(("127.0.0.1", port), FakeHandler)
                break
            except OSError:
                continue
        else:
            raise RuntimeError("no free port in 18750-18759")
        self.url = "http://127.0.0.1:%d" % self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


class FakeHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        req = {"method": self.command, "path": self.path, "headers": dict(self.headers),
               "body": self.rfile.read(n).decode() if n else None, "time": time.monotonic()}
        with self.server.lock:
            self.server.requests.append(req)
            count = len(self.server.requests)
        answer = self.server.respond(req, count)
        if answer is None:
            self.close_connection = True
            return
        status, headers, body = answer
        binary = isinstance(body, bytes)  # sent as it is (a tar stream)
        data = body if binary else json.dumps(body).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream" if binary else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = handle_any


@pytest.fixture
def fake_api():
    servers = []

    def start(respond):
        s = FakeAPI(respond)
        servers.append(s)
        return s
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def sandboxes(*ids, cursor=None):
    return {"sandboxes": [{"sandbox_id": i, "image": "host", "status": "ready"} for i in ids],
            "next_cursor": cursor}


# Values YAML is easy to get wrong: words it reads as booleans or null,
# number-like strings, exponents, separators and controls, empty containers.
TRICKY = {"sandbox_id": "sb1", "status": "ready", "yes": "no", "": "empty key", "a: b": "c #d",
          "num": 1, "neg": -5, "big": 9007199254740993, "f": 1.5, "e": 1e20, "small": 1e-7,
          "t": True, "n": None, "s": "line1\nline2\ttab \"q\" \\ back",
          "u": "\u00e9 \u2028 \u0085 \ufeff \u0001 \x7f \U0001F600", "numstr": "1.0",
          "date": "2026-01-01T00:00:00Z", "tilde": "~", "star": "*x", "dash": "- x", "emptyo": {},
          "emptya": [], "nested": {"a": [1, [2, 3], {"b": []}, {"c": {"d": None}}], "z": [[]]},
          "labels": {"Y": "on", "null": "NULL", "k/v.x": "/path"}}


def test_yaml_output_reads_back_as_the_json(home, fake_api):
    api = fake_api(lambda req, n: (200, {}, TRICKY))
    j = ctl("get", "sb1", "-o=json", home=home, ORCHARD_URL=api.url)
    y = ctl("get", "sb1", "-o", "yaml", home=home, ORCHARD_URL=api.url)
    assert j.returncode == 0 and y.returncode == 0, (j.stderr, y.stderr)
    assert json.loads(j.stdout) == TRICKY
    assert yaml.safe_load(y.stdout) == TRICKY, y.stdout
    assert "\nsandbox_id: sb1\n" in "\n" + y.stdout    # plain where that is safe
    assert ctl("get", "sb1", "--output=yaml", home=home, ORCHARD_URL=api.url).stdout == y.stdout


def test_jsonpath_subset(home, fake_api):
    api = fake_api(lambda req, n: (200, {}, TRICKY if "/sandboxes/" in req["path"]
                                   else sandboxes("a1", "b2")))

    def jp(expr, *args):
        return ctl(*(args or ("get", "sb1")), "-o", "jsonpath=" + expr, home=home, ORCHARD_URL=api.url)
    assert jp("{.status}").stdout == "ready\n"
    assert jp(".status").stdout == "ready\n"
    assert jp(".nested.a[1]").stdout == "[2,3]\n"
    assert jp(".nested.a[-1].c.d").stdout == "null\n"
    assert jp(".nested.a[*]").stdout == '1 [2,3] {"b":[]} {"c":{"d":null}}\n'
    assert jp("{.sandboxes[*].sandbox_id}", "ls").stdout == "a1 b2\n"
    assert jp(".sandboxes[0].status", "ls").stdout == "ready\n"
    assert json.loads(jp(".").stdout) == TRICKY
    r = jp(".nosuch")
    assert r.returncode == 125 and 'jsonpath ".nosuch": no such field' in r.stderr
    for bad in ("x", ".a..b", ".a[x]", "..a", "", ".a[1"):
        r = jp(bad)
        assert r.returncode == 125 and "-o jsonpath= takes" in r.stderr, (bad, r.stderr)
    n = len(api.requests)
    assert ctl("get", "sb1", "-o", "xml", home=home, ORCHARD_URL=api.url).returncode == 125
    assert len(api.requests) == n                                # a usage error sends nothing


def test_version_as_a_document(home, fake_api):
    api = fake_api(lambda req, n: (200, {}, {"service": "orchard-api", "version": "9.9"}))
    doc = yaml.safe_load(ctl("version", "-o", "yaml", home=home, ORCHARD_URL=api.url).stdout)
    assert doc["server"] == {"service": "orchard-api", "version": "9.9"} and doc["client"]["version"]
    r = ctl("version", "-o", "jsonpath=.server.version", home=home, ORCHARD_URL=api.url)
    assert (r.returncode, r.stdout) == (0, "9.9\n")
    assert json.loads(ctl("version", "-o", "json", home=home).stdout)["server"] is None   # no server configured


def test_wide_and_no_headers(home, fake_api):
    api = fake_api(lambda req, n: (200, {}, sandboxes("a1", "b2")))
    plain = ctl("ls", home=home, ORCHARD_URL=api.url).stdout.splitlines()
    wide = ctl("ls", "-o", "wide", home=home, ORCHARD_URL=api.url).stdout.splitlines()
    bare = ctl("ls", "--no-headers", home=home, ORCHARD_URL=api.url).stdout.splitlines()
    assert plain[0].split()[:3] == ["ID", "IMAGE", "STATUS"] and "LABELS" in wide[0]
    assert [l.split() for l in bare] == [l.split() for l in plain[1:]] and bare[0].startswith("a1 ")
    bare_wide = ctl("ls", "-o", "wide", "--no-headers", home=home, ORCHARD_URL=api.url).stdout.splitlines()
    assert [l.split() for l in bare_wide] == [l.split() for l in wide[1:]]
    assert ctl("--no-headers", "ls", home=home, ORCHARD_URL=api.url).stdout.splitlines() == bare


@pytest.mark.parametrize("args", [["ls"], ["get", "sb1"], ["wait", "sb1"], ["create"], ["jobs", "ls", "sb1"],
                                  ["jobs", "get", "j1"], ["files", "ls", "sb1"], ["keys", "ls"],
                                  ["tenants", "ls"], ["stats"], ["checkpoint", "ls"],
                                  ["patch", "diff", "sb1"]])
def test_every_command_that_shows_objects_takes_every_document_format(home, fake_api, args):
    """-o json, -o=json, -o yaml and -o jsonpath are accepted (no usage error) by each."""
    def respond(req, n):
        return 200, {}, {"sandbox_id": "sb1", "status": "ready", "job_id": "j1", "sandboxes": [],
                         "jobs": [], "files": [], "keys": [], "tenants": [], "checkpoints": [],
                         "patch": "", "items": [], "next_cursor": None}
    api = fake_api(respond)
    docs = []
    for fmt in ("json", "=json", "yaml", "jsonpath={.status}"):
        r = ctl(*args, "-o", fmt, home=home, ORCHARD_URL=api.url)
        assert r.returncode in (0, 125) and "-o wants" not in r.stderr, (args, fmt, r.stderr)
        if fmt != "jsonpath={.status}" and r.returncode == 0:
            docs.append(yaml.safe_load(r.stdout))
    assert docs and all(d == docs[0] for d in docs), (args, docs)


def test_debug_shows_requests_but_never_the_key(home, fake_api):
    api = fake_api(lambda req, n: (200, {"X-Request-ID": "rid-42"}, sandboxes("a1")))
    line = re.compile(r"^orchardctl: debug: GET %s/v1/sandboxes -> 200 \(request rid-42, "
                      r"key orch_0123456789ab_\*\*\*\*; \d+ ms: connect \d+, tls -?\d+, first byte \d+\)$"
                      % re.escape(api.url), re.M)
    for args, env in ((["-v", "ls"], {}), (["--debug", "ls"], {}), (["ls", "--debug"], {}),
                      (["ls"], {"ORCHARD_DEBUG": "1"})):
        r = ctl(*args, home=home, ORCHARD_URL=api.url, ORCHARD_API_KEY=KEY, **env)
        assert r.returncode == 0 and line.search(r.stderr), (args, r.stderr)
        assert KEY not in r.stderr and KEY[18:] not in r.stderr and r.stdout.startswith("ID"), r.stderr
    r = ctl("ls", home=home, ORCHARD_URL=api.url, ORCHARD_API_KEY=KEY, ORCHARD_DEBUG="0")
    assert r.returncode == 0 and r.stderr == ""
    r = ctl("-v", "ls", home=home, ORCHARD_URL=api.url, ORCHARD_API_KEY="not-shaped-like-ours-s3cret")
    assert "key ****;" in r.stderr and "s3cret" not in r.stderr, r.stderr
    r = ctl("-v", "ls", home=home, ORCHARD_URL="http://127.0.0.1:1", ORCHARD_API_KEY=KEY)
    assert r.returncode == 125 and "debug: GET http://127.0.0.1:1/v1/sandboxes -> failed: " in r.stderr


def test_503_with_retry_after_is_retried_then_succeeds(home, fake_api):
    api = fake_api(lambda req, n: (503, {"Retry-After": "1"}, {"detail": "busy"}) if n < 3
                   else (200, {}, sandboxes("a1")))
    t0 = time.monotonic()
    r = ctl("ls", "-q", home=home, ORCHARD_URL=api.url)
    assert (r.returncode, r.stdout) == (0, "a1\n"), r.stderr
    assert len(api.requests) == 3
    gaps = [b["time"] - a["time"] for a, b in zip(api.requests, api.requests[1:])]
    assert all(g >= 0.9 for g in gaps), gaps  # Retry-After was honoured
    assert time.monotonic() - t0 < 10


def test_503_retries_are_bounded(home, fake_api):
    api = fake_api(lambda req, n: (503, {"Retry-After": "0"}, {"detail": "overloaded"}))
    r = ctl("get", "sb1", home=home, ORCHARD_URL=api.url)
    assert r.returncode == 125 and "overloaded (HTTP 503" in r.stderr
    assert len(api.requests) == 4


def test_other_errors_are_not_retried(home, fake_api):
    api = fake_api(lambda req, n: (500, {}, {"detail": "boom"}))
    r = ctl("ls", home=home, ORCHARD_URL=api.url)
    assert r.returncode == 125 and "boom (HTTP 500" in r.stderr
    assert len(api.requests) == 1


def test_dropped_connection_retried_with_backoff_for_get(home, fake_api):
    api = fake_api(lambda req, n: None if n == 1 else (200, {}, {"sandbox_id": "sb1", "status": "ready"}))
    r = ctl("get", "sb1", "-o", "json", home=home, ORCHARD_URL=api.url)
    assert r.returncode == 0 and json.loads(r.stdout)["sandbox_id"] == "sb1"
    assert len(api.requests) == 2 and api.requests[1]["time"] - api.requests[0]["time"] >= 0.4


def test_exec_retry_reuses_its_idempotency_key_and_sends_stdin(home, fake_api):
    job = {"job_id": "j1", "status": "succeeded", "stdout": "out\n", "stderr": "err\n", "exit_code": 5}
    api = fake_api(lambda req, n: None if n == 1 else (200, {}, job))
    r = ctl("exec", "sb1", "-w", "/src", "--login", "--", "echo", "it's", home=home,
            ORCHARD_URL=api.url, input="piped\n")
    assert (r.returncode, r.stdout) == (5, "out\n") and r.stderr == "err\n"
    assert len(api.requests) == 2
    keys = [q["headers"].get("Idempotency-Key") for q in api.requests]
    assert keys[0] and keys[0] == keys[1]
    body = json.loads(api.requests[1]["body"])
    assert body == {"command": "echo 'it'\\''s'", "wait": True, "stream": True, "cwd": "/src",
                    "login_shell": True, "stdin": "piped\n"}


def test_ls_follows_next_cursor_and_sends_filters(home, fake_api):
    pages = {None: sandboxes("a", "b", cursor="c1"), "c1": sandboxes("c", cursor="c2"),
             "c2": sandboxes("d")}

    def respond(req, n):
        m = re.search(r"[?&]cursor=([^&]*)", req["path"])
        return 200, {}, pages[m.group(1) if m else None]
    api = fake_api(respond)
    r = ctl("ls", "--status", "ready", "-l", "team=ml", "-l", "run=4 2", "-o", "json",
            home=home, ORCHARD_URL=api.url)
    assert r.returncode == 0, r.stderr
    assert [s["sandbox_id"] for s in json.loads(r.stdout)["sandboxes"]] == ["a", "b", "c", "d"]
    assert len(api.requests) == 3
    assert api.requests[0]["path"] == "/v1/sandboxes?status=ready&label=team%3Dml&label=run%3D4%202"
    assert api.requests[2]["path"].endswith("&cursor=c2")


def test_routes_missing_from_the_server_are_named_as_such(home, fake_api):
    api = fake_api(lambda req, n: (404, {}, {"detail": "no route for %s %s" % (req["method"], req["path"]),
                                             "code": "not_found"}))
    for args in (["jobs", "ls", "sb1"], ["jobs", "cancel", "j1"]):
        r = ctl(*args, home=home, ORCHARD_URL=api.url)
        assert r.returncode == 125 and "not supported by this server" in r.stderr, r.stderr
    api2 = fake_api(lambda req, n: (404, {}, {"detail": "job j1 not found", "code": "not_found"}))
    r = ctl("jobs", "cancel", "j1", home=home, ORCHARD_URL=api2.url)
    assert r.returncode == 125 and "job j1 not found" in r.stderr and "not supported" not in r.stderr


def test_flags_beat_context_beat_env_beat_current_context(home, fake_api):
    seen = []
    api = fake_api(lambda req, n: seen.append(req["headers"].get("X-API-Key")) or (200, {}, sandboxes()))
    ctl("config", "set-context", "cur", "--url", api.url, "--api-key", "cur-key", home=home)
    ctl("config", "set-context", "other", "--url", api.url, "--api-key", "other-key", home=home)
    assert ctl("ls", home=home).returncode == 0                                    # current context
    assert ctl("ls", home=home, ORCHARD_API_KEY="env-key").returncode == 0         # env over it
    assert ctl("ls", "--context", "other", home=home, ORCHARD_API_KEY="env-key").returncode == 0
    assert ctl("ls", "--api-key", "flag-key", "--context", "other", home=home).returncode == 0
    assert ctl("--api-key", "flag-key", "ls", home=home, ORCHARD_URL="http://127.0.0.1:1",
               ORCHARD_CONTEXT="nosuch").returncode == 125                          # named but missing
    assert seen == ["cur-key", "env-key", "other-key", "flag-key"]


# ---- the real stack ---------------------------------------------------------

def sctl(stack, home, *args, input=None, key=None, timeout=180):
    return ctl(*args, home=home, input=input, timeout=timeout, ORCHARD_URL=stack.url,
               ORCHARD_API_KEY=key or stack.admin_key, ORCHARD_CACERT=stack.cacert)


def run_in_pty(args, env, answer=None, prompt=b"[y/N]", timeout=120):
    """Run orchardctl on a pseudo-terminal; type answer after prompt; (status, output)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(CTL, [CTL] + list(args), env)
    out, sent, deadline = b"", False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            try:
                data = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out += data
            if answer is not None and not sent and prompt in out:
                os.write(fd, answer)
                sent = True
        else:
            os.kill(pid, 9)
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")


def stack_env(stack, home):
    return clean_env(home, ORCHARD_URL=stack.url, ORCHARD_API_KEY=stack.admin_key,
                     ORCHARD_CACERT=stack.cacert, TERM="xterm")


def test_create_sends_lifetimes_labels_env_workdir_and_ls_filters(stack, admin, home):
    tag = "t%d" % os.getpid()
    r = sctl(stack, home, "create", "--ttl", "2h", "--idle-timeout", "10m", "-l", "suite=" + tag,
             "-l", "run=1", "--env", "FOO=bar", "--workdir", "/tmp", "--wait", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no spinner without a terminal
    sid = json.loads(r.stdout)["sandbox_id"]
    try:
        sb = admin.get("%s/v1/sandboxes/%s" % (stack.url, sid)).json()
        assert (sb["ttl_seconds"], sb["idle_timeout_seconds"]) == (7200, 600), sb
        assert sb["labels"] == {"suite": tag, "run": "1"} and sb["env"] == {"FOO": "bar"}, sb
        assert sb["workdir"] == "/tmp" and sb["status"] == "ready", sb
        assert sctl(stack, home, "ls", "-l", "suite=" + tag, "-q").stdout == sid + "\n"
        assert sctl(stack, home, "ls", "-l", "suite=" + tag, "-l", "run=2", "-q").stdout == ""
        assert sctl(stack, home, "ls", "--status", "pending", "-l", "suite=" + tag, "-q").stdout == ""
        wide = sctl(stack, home, "ls", "-l", "suite=" + tag, "-o", "wide").stdout
        assert re.search(r"^%s\s+host\s+ready\s.*\sblocked\s+2h\s+10m\s+\S*suite=%s" % (sid, tag),
                         wide, re.M), wide
        d = sctl(stack, home, "describe", sid)
        assert d.returncode == 0, d.stderr
        for line in ("Status:          ready", "TTL:             2h", "Idle timeout:    10m",
                     "Workdir:         /tmp", "Env:             FOO", "Recent jobs:"):
            assert line in d.stdout, (line, d.stdout)
        assert "bar" not in d.stdout  # env values are not shown
        # created_at is epoch seconds; describe shows its ISO twin and an age
        assert re.search(r"^Created:\s+%s \(\d+[smhd] ago\)$" % re.escape(sb["created_at_iso"]),
                         d.stdout, re.M), d.stdout
    finally:
        sctl(stack, home, "rm", sid)


def test_ls_pages_through_everything_and_rm_all_needs_yes(stack, home):
    tag = "p%d" % os.getpid()
    ids = [sctl(stack, home, "create", "-l", "page=" + tag).stdout.strip() for _ in range(3)]
    assert all(ids), ids
    r = sctl(stack, home, "ls", "-l", "page=" + tag, "--chunk-size", "1", "-q")
    assert r.stdout.split() == ids, r.stderr
    r = sctl(stack, home, "ls", "-l", "page=" + tag, "--chunk-size", "2", "-o", "json")
    assert [s["sandbox_id"] for s in json.loads(r.stdout)["sandboxes"]] == ids
    r = sctl(stack, home, "rm", "--all", "-l", "page=" + tag)  # stdin is not a terminal
    assert r.returncode == 125 and "pass -y" in r.stderr
    assert len(sctl(stack, home, "ls", "-l", "page=" + tag, "-q").stdout.split()) == 3
    r = sctl(stack, home, "rm", "--all", "-l", "page=" + tag, "-y")
    assert r.returncode == 0 and sorted(r.stdout.split()) == sorted(ids)
    assert sctl(stack, home, "ls", "-l", "page=" + tag, "-q").stdout == ""


def test_ls_watch_prints_what_changes(stack, admin, home):
    """ls -w -o json: the current list, then one line per change (a new
    sandbox, its status becoming ready, its deletion), until killed."""
    tag = "w%d" % os.getpid()
    env = clean_env(home, ORCHARD_URL=stack.url, ORCHARD_API_KEY=stack.admin_key,
                    ORCHARD_CACERT=stack.cacert)
    p = subprocess.Popen([CTL, "ls", "-w", "-o", "json", "-l", "watch=" + tag], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                         text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in p.stdout], daemon=True).start()

    def change():
        line = json.loads(lines.get(timeout=60))   # a poll every 2 s: never this long
        return line["sandbox_id"], line["status"]
    try:
        sid = sctl(stack, home, "create", "-l", "watch=" + tag).stdout.strip()
        assert sid
        seen = [change()]
        assert seen[0][0] == sid and seen[0][1] in ("pending", "ready"), seen
        while seen[-1] != (sid, "ready"):
            seen.append(change())
        assert sctl(stack, home, "rm", sid).returncode == 0
        assert change() == (sid, "deleted")
        assert p.poll() is None          # still watching
    finally:
        p.kill()
        p.wait()


def test_rm_all_asks_on_a_terminal(stack, home):
    tag = "y%d" % os.getpid()
    sid = sctl(stack, home, "create", "-l", "ask=" + tag).stdout.strip()
    status, out = run_in_pty(["rm", "--all", "-l", "ask=" + tag], stack_env(stack, home), b"n\n")
    assert status == 125 and "Delete 1 sandbox? [y/N]" in out and sid in out, out
    assert sctl(stack, home, "ls", "-l", "ask=" + tag, "-q").stdout == sid + "\n"
    status, out = run_in_pty(["rm", "--all", "-l", "ask=" + tag], stack_env(stack, home), b"y\n")
    assert status == 0, out
    assert sctl(stack, home, "ls", "-l", "ask=" + tag, "-q").stdout == ""


def test_create_wait_shows_a_spinner_on_a_terminal(stack, home):
    status, out = run_in_pty(["create", "--wait"], stack_env(stack, home))
    sid = out.split("\r\x1b[K")[-1].strip()  # the id, after the spinner's line is erased
    try:
        assert status == 0, out
        assert re.fullmatch(r"[0-9a-f]{8}", sid), repr(out)
        assert out.startswith("\r\x1b[K| waiting for sandbox %s to be ready (0s)" % sid), repr(out)
    finally:
        sctl(stack, home, "rm", sid)


def test_exec_does_not_read_a_terminal(stack, sandbox, home):
    # On a terminal stdin is the user's keyboard: not forwarded, nothing waits for EOF.
    status, out = run_in_pty(["exec", sandbox, "--", "sh", "-c", "cat; echo end"],
                             stack_env(stack, home), timeout=60)
    assert (status, out) == (0, "end\r\n"), repr(out)


def test_exec_stdin_exit_codes_workdir_env_login_timeout(stack, sandbox, home):
    r = sctl(stack, home, "exec", sandbox, "--", "sh", "-c", "wc -l; cat >/dev/null", input="a\nb\n")
    assert (r.returncode, r.stdout.strip()) == (0, "2"), r.stderr
    r = sctl(stack, home, "exec", sandbox, "--", "cat", input="é\x00x")
    assert r.stdout == "é\x00x"
    assert sctl(stack, home, "exec", sandbox, "--", "sh", "-c", "exit 3").returncode == 3
    assert sctl(stack, home, "exec", "-w", "/tmp", sandbox, "--", "pwd").stdout == "/tmp\n"
    assert sctl(stack, home, "exec", sandbox, "--cwd", "/", "--", "pwd").stdout == "/\n"
    r = sctl(stack, home, "exec", sandbox, "-e", "A=1", "-e", "B=x y", "--", "sh", "-c", 'echo "$A $B"')
    assert r.stdout == "1 x y\n"
    r = sctl(stack, home, "exec", sandbox, "--login", "--", "shopt -q login_shell && echo login")
    assert (r.returncode, r.stdout) == (0, "login\n"), r.stderr
    r = sctl(stack, home, "exec", sandbox, "--login", "--", "printf", "%s|", "a b", "it's")
    assert r.stdout == "a b|it's|", r.stderr
    jobs = stack.counts()["jobs"]
    r = sctl(stack, home, "exec", sandbox, "--", "wc", "-c", input="x" * ((8 << 20) + 1))
    assert r.returncode == 125 and "larger than 8 MiB" in r.stderr
    assert stack.counts()["jobs"] == jobs  # refused before sending
    r = sctl(stack, home, "exec", sandbox, "--timeout", "1", "--", "sleep", "10")
    assert r.returncode == 124 and "timed out after 1s" in r.stderr


def test_exit_codes_are_reserved_like_dockers(stack, sandbox, home):
    """125: orchardctl's own failure; 126/127: the command could not run;
    otherwise the command's own status, whatever it is."""
    def status(*args):
        return sctl(stack, home, *args).returncode
    assert status("exec", sandbox, "--", "false") == 1
    assert status("exec", sandbox, "--", "sh", "-c", "exit 2") == 2
    assert status("exec", sandbox, "--", "sh", "-c", "exit 125") == 125  # the command's own, passed on
    assert status("exec", sandbox, "--", "no-such-command-xyz") == 127
    assert status("exec", sandbox, "--", "sh", "-c", "printf 'echo hi' > /tmp/noexec; chmod 644 /tmp/noexec") == 0
    assert status("exec", sandbox, "--", "/tmp/noexec") == 126
    assert status("exec", sandbox, "--", "/tmp") == 126                     # a directory
    r = sctl(stack, home, "exec", "no-such-sandbox", "--", "true")
    assert r.returncode == 125 and "not found" in r.stderr, r.stderr
    assert status("exec", sandbox) == 125                                     # usage: no command
    assert status("exec", sandbox, "--bogus", "--", "true") == 125
    assert status("no-such-subcommand") == 125
    r = ctl("exec", sandbox, "--", "true", home=home, ORCHARD_URL="https://127.0.0.1:1")
    assert r.returncode == 125 and "cannot reach" in r.stderr, r.stderr       # network error
    job = sctl(stack, home, "exec", "-d", sandbox, "--", "sh", "-c", "exit 2").stdout.strip()
    assert status("jobs", "wait", job) == 2
    assert "125 orchardctl's own error" in ctl("--help", home=home).stdout


def test_detach_then_jobs_wait_logs_get(stack, sandbox, home):
    r = sctl(stack, home, "exec", "--detach", sandbox, "--", "sh", "-c",
             "sleep 1; echo out; echo err >&2; exit 7")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert re.fullmatch(r"[0-9a-f-]{36}", job), r.stdout
    assert sctl(stack, home, "jobs", "wait", job).returncode == 7
    r = sctl(stack, home, "jobs", "logs", job)
    assert (r.returncode, r.stdout, r.stderr) == (0, "out\n", "err\n")
    got = json.loads(sctl(stack, home, "jobs", "get", job, "-o", "json").stdout)
    assert (got["job_id"], got["status"], got["exit_code"]) == (job, "failed", 7), got
    table = sctl(stack, home, "jobs", "get", job).stdout
    assert re.search(r"^exit_code\s+7$", table, re.M) and re.search(r"^stdout\s+\(4 bytes", table, re.M)
    slow = sctl(stack, home, "exec", "-d", sandbox, "--", "sleep", "4").stdout.strip()
    r = sctl(stack, home, "jobs", "wait", slow, "--timeout", "1")
    assert r.returncode == 125 and "still" in r.stderr
    assert sctl(stack, home, "jobs", "logs", "-f", slow).returncode == 0
    assert sctl(stack, home, "jobs", "wait", slow).returncode == 0
    r = sctl(stack, home, "jobs", "get", "00000000-0000-4000-8000-000000000000")
    assert r.returncode == 125 and "not found (HTTP 404" in r.stderr


def test_output_formats_on_the_real_stack(stack, sandbox, home):
    r = sctl(stack, home, "exec", "-d", sandbox, "--", "printf", 'yes: no\\n- 1.0\\t"x"')
    job = r.stdout.strip()
    assert sctl(stack, home, "jobs", "wait", job).returncode == 0
    j = json.loads(sctl(stack, home, "jobs", "get", job, "-o", "json").stdout)
    assert j["stdout"] == 'yes: no\n- 1.0\t"x"'
    assert yaml.safe_load(sctl(stack, home, "jobs", "get", job, "-o", "yaml").stdout) == j
    r = sctl(stack, home, "jobs", "get", job, "-o", "jsonpath={.exit_code}")
    assert (r.returncode, r.stdout) == (0, "0\n"), r.stderr
    r = sctl(stack, home, "jobs", "ls", sandbox, "-o", "jsonpath={.jobs[*].job_id}")
    assert job in r.stdout.split(), r.stdout
    assert not any(l.startswith("JOB") for l in sctl(stack, home, "jobs", "ls", sandbox,
                                                     "--no-headers").stdout.splitlines())
    r = sctl(stack, home, "ls", "-o", "jsonpath={.sandboxes[*].sandbox_id}")
    assert sandbox in r.stdout.split(), r.stdout
    keys = sctl(stack, home, "keys", "ls", "-o", "yaml")
    assert keys.returncode == 0 and isinstance(yaml.safe_load(keys.stdout)["keys"], list), keys.stderr


def test_debug_on_the_real_stack_never_shows_the_key(stack, sandbox, home, tmp_path):
    key = stack.admin_key
    src = tmp_path / "f.txt"
    src.write_text("hi")
    for args in (["exec", sandbox, "--", "echo", "hi"], ["get", sandbox], ["cp", str(src), sandbox + ":/tmp/f"],
                 ["files", "cat", sandbox, "/tmp/f"], ["keys", "ls"]):
        r = sctl(stack, home, "--debug", *args)
        assert r.returncode == 0, (args, r.stderr)
        assert "orchardctl: debug: " in r.stderr and stack.url in r.stderr, (args, r.stderr)
        assert re.search(r"-> 2\d\d \(request [0-9a-f]+", r.stderr), (args, r.stderr)
        assert key not in r.stderr and key not in r.stdout, args
        assert key.split("_")[-1] not in r.stderr, args
    status, out = run_in_pty(["--debug", "exec", "-t", sandbox, "--", "true"], stack_env(stack, home))
    assert status == 0 and re.search(r"debug: GET \S+/exec/pty\S* -> 101 ", out), out    # the WebSocket too
    assert key not in out and key.split("_")[-1] not in out


def test_keys_create_and_tenants_delete(stack, admin, home):
    t = "del-%d" % os.getpid()
    assert sctl(stack, home, "tenants", "create", t).returncode == 0
    r = sctl(stack, home, "keys", "create", "--tenant", t, "--name", "ci")
    assert r.returncode == 0 and re.fullmatch(r"orch_[0-9a-f]{12}_[0-9a-f]{40}\n", r.stdout), r.stderr
    key = r.stdout.strip()
    got = json.loads(sctl(stack, home, "keys", "create", "--tenant", t, "--admin", "-o", "json").stdout)
    assert (got["tenant"], got["role"], got["key"].startswith("orch_" + got["key_id"])) == (t, "admin", True)
    r = sctl(stack, home, "keys", "create", "--tenant", "no-such-tenant-x")
    assert r.returncode == 125 and "not found (HTTP 404" in r.stderr
    assert sctl(stack, home, "keys", "create").returncode == 125                      # --tenant required
    sid = sctl(stack, home, "create", key=key).stdout.strip()
    assert sctl(stack, home, "get", sid, key=key).returncode == 0

    # Live sandboxes: refused, nothing changed.
    r = sctl(stack, home, "tenants", "delete", t)
    assert r.returncode == 125 and "has 1 live sandbox" in r.stderr and "(HTTP 409" in r.stderr, r.stderr
    assert sctl(stack, home, "get", sid, key=key).returncode == 0
    assert t in sctl(stack, home, "tenants", "ls", "-q").stdout.split()
    # Not the tenant of the key in use.
    mine = admin.get(stack.url + "/v1/keys").json()["keys"]
    own = [k["tenant"] for k in mine if stack.admin_key.startswith("orch_%s_" % k["key_id"])][0]
    r = sctl(stack, home, "tenants", "delete", own)
    assert r.returncode == 125 and "tenant of the key making this request" in r.stderr, r.stderr
    assert admin.delete("%s/v1/tenants/%s?force=maybe" % (stack.url, t)).status_code == 422

    r = sctl(stack, home, "tenants", "delete", t, "--force")
    assert (r.returncode, r.stdout) == (0, "%s (sandboxes deleted: 1, checkpoints deleted: 0, "
                                           "keys revoked: 2)\n" % t), r.stderr
    assert t not in sctl(stack, home, "tenants", "ls", "-q").stdout.split()
    listed = stack.admin("tenant", "list").stdout          # orchard-admin still shows it, as deleted
    assert re.search(r"^\d+\s+%s\s+0\s+\S+\s+\d{4}-\d\d-\d\dT" % t, listed, re.M), listed
    keys = json.loads(sctl(stack, home, "keys", "ls", "--tenant", t, "-o", "json").stdout)["keys"]
    assert len(keys) == 2 and all(k["revoked"] for k in keys), keys
    deadline = time.monotonic() + 60
    while sctl(stack, home, "ls", key=key).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.5)                                    # the key cache hears of it
    r = sctl(stack, home, "ls", key=key)
    assert r.returncode == 125 and "(HTTP 403" in r.stderr, r.stderr
    r = sctl(stack, home, "tenants", "create", t)
    assert r.returncode == 125 and "names are not reused" in r.stderr, r.stderr
    assert "not found" in sctl(stack, home, "keys", "create", "--tenant", t).stderr
    r = sctl(stack, home, "tenants", "delete", t)
    assert r.returncode == 125 and "not found (HTTP 404" in r.stderr
    assert admin.patch("%s/v1/tenants/%s" % (stack.url, t), json={"max_sandboxes": 1}).status_code == 404


def test_jobs_ls_and_cancel(stack, admin, sandbox, home):
    done = sctl(stack, home, "exec", "-d", sandbox, "--", "true").stdout.strip()
    sctl(stack, home, "jobs", "wait", done)
    r = sctl(stack, home, "jobs", "ls", sandbox)
    assert r.returncode == 0 and re.search(r"^%s\s+succeeded\s+0\s" % done, r.stdout, re.M), r.stdout
    assert done in [j["job_id"] for j in json.loads(sctl(stack, home, "jobs", "ls", sandbox,
                                                         "-o", "json").stdout)["jobs"]]
    r = admin.post("%s/v1/jobs/00000000-0000-4000-8000-000000000000/cancel" % stack.url, json={})
    assert r.status_code == 404 and "no route" not in r.text, r.text  # the route, an unknown job
    slow = sctl(stack, home, "exec", "-d", sandbox, "--", "sleep", "60").stdout.strip()
    t0 = time.monotonic()
    r = sctl(stack, home, "jobs", "cancel", slow)
    assert (r.returncode, r.stdout) == (0, slow + "\n"), r.stderr
    assert sctl(stack, home, "jobs", "wait", slow, "--timeout", "30").returncode != 0
    assert time.monotonic() - t0 < 30


def test_heartbeat_get_version_and_errors(stack, admin, home):
    # A sandbox of its own: a heartbeat arms the heartbeat rule (deleted after
    # 180 s without one), which must not reach the session's shared sandbox.
    sid = stack.new_sandbox(admin)
    try:
        assert sctl(stack, home, "heartbeat", sid).stdout == sid + "\n"
    finally:
        admin.delete("%s/sandboxes/%s" % (stack.url, sid))
    r = sctl(stack, home, "heartbeat", "nosuch")
    assert r.returncode == 125 and "not found (HTTP 404" in r.stderr
    r = sctl(stack, home, "get", "nosuch")
    assert r.returncode == 125 and "not found (HTTP 404, request " in r.stderr
    r = sctl(stack, home, "ls", key="orch_000000000000_" + "0" * 40)
    assert r.returncode == 125 and "hint: the API key was refused" in r.stderr
    r = sctl(stack, home, "version")
    assert r.returncode == 0 and re.search(r"^server %s: \S+ \S+$" % re.escape(stack.url), r.stdout, re.M)


def test_a_saved_context_is_enough_to_reach_the_stack(stack, sandbox, home):
    r = ctl("config", "set-context", "it", "--url", stack.url, "--api-key", stack.admin_key,
            "--cacert", stack.cacert, home=home)
    assert r.returncode == 0, r.stderr
    r = ctl("exec", sandbox, "--", "echo", "via context", home=home)
    assert (r.returncode, r.stdout) == (0, "via context\n"), r.stderr
    r = ctl("ls", "--cacert", "/nonexistent/ca.crt", home=home)  # a flag beats the context
    assert r.returncode == 125 and "TLS with %s failed" % stack.url in r.stderr, r.stderr
