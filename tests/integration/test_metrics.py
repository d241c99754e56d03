"""Prometheus /metrics of orchard-api and orchard-controller, and nginx's
stub_status (docs/observability.md).

The module runs its own stack (the controller's metrics listener is opt-in:
ORCHARD_CONTROLLER_METRICS), so its counters move only by what these tests
do. Every scrape goes through a strict parser of the text format 0.0.4.
"""
import math
import os
import re
import socket
import time
import uuid

import pytest
import requests

from stack import Stack, free_port

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
NUMBER_RE = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\Z")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
VERSION = re.search(r'ORC_VERSION "([^"]+)"', open(os.path.join(
    os.path.dirname(__file__), "..", "..", "lib", "version.h")).read()).group(1)


# ---- a strict parser of the text exposition format -----------------------

class Family:
    def __init__(self, name):
        self.name = name
        self.help = None
        self.type = None
        self.samples = []      # (sample name, labels dict, value)


def parse_value(s, where):
    if s in ("NaN", "+Inf", "-Inf"):
        return float(s)
    assert NUMBER_RE.match(s), "%s: bad value %r" % (where, s)
    return float(s)


def parse_labels(s, where):
    """'{a="x",b="y"}' at the start of s: (labels, rest of s)."""
    labels = {}
    assert s.startswith("{"), where
    i = 1
    if s[i] == "}":
        return labels, s[i + 1:]
    while True:
        m = re.match(r"[a-zA-Z_][a-zA-Z0-9_]*", s[i:])
        assert m, "%s: bad label name at %r" % (where, s[i:])
        name = m.group(0)
        i += len(name)
        assert s[i:i + 2] == '="', "%s: expected =\" after %s" % (where, name)
        i += 2
        value = []
        while True:
            assert i < len(s), "%s: unterminated label value" % where
            c = s[i]
            if c == "\\":
                esc = s[i + 1:i + 2]
                assert esc in ("\\", '"', "n"), "%s: bad escape \\%s" % (where, esc)
                value.append("\n" if esc == "n" else esc)
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                assert c != "\n", where
                value.append(c)
                i += 1
        assert name not in labels, "%s: label %s twice" % (where, name)
        labels[name] = "".join(value)
        if s[i] == ",":
            i += 1
            continue
        assert s[i] == "}", "%s: expected , or } at %r" % (where, s[i:])
        return labels, s[i + 1:]


def family_of(sample, fam):
    """Does a sample name belong to the family being read?"""
    if fam.type == "histogram":
        return sample in (fam.name + "_bucket", fam.name + "_sum", fam.name + "_count")
    return sample == fam.name


def parse_metrics(text):
    """Every family, checked strictly; {name: Family}."""
    assert text.endswith("\n"), "the text must end with a newline"
    fams, cur, seen_series = {}, None, set()
    for n, line in enumerate(text[:-1].split("\n"), 1):
        where = "line %d %r" % (n, line)
        assert line, "%s: empty line" % where
        if line.startswith("#"):
            m = re.match(r"# (HELP|TYPE) (\S+) ?(.*)\Z", line)
            assert m, "%s: a comment must be HELP or TYPE" % where
            kind, name, rest = m.groups()
            assert NAME_RE.match(name), "%s: bad metric name" % where
            fam = fams.get(name)
            if fam is None:
                fam = fams[name] = Family(name)
            assert fam is cur or not fam.samples, "%s: family %s split" % (where, name)
            if kind == "HELP":
                assert fam.help is None, "%s: HELP twice" % where
                assert not re.search(r"\\[^\\n]", rest.replace("\\\\", "")), where
                fam.help = rest
            else:
                assert fam.type is None, "%s: TYPE twice" % where
                assert rest in TYPES, "%s: bad type" % where
                fam.type = rest
            cur = fam
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(.*)\Z", line)
        assert m, "%s: bad sample" % where
        name, rest = m.groups()
        labels = {}
        if rest.startswith("{"):
            labels, rest = parse_labels(rest, where)
        for k in labels:
            assert LABEL_RE.match(k) and not k.startswith("__"), "%s: label %s" % (where, k)
        assert rest.startswith(" ") and rest.count(" ") == 1, \
            "%s: expected one space and a value (no timestamp)" % where
        value = parse_value(rest[1:], where)
        assert cur is not None and cur.type is not None, "%s: sample before TYPE" % where
        assert family_of(name, cur), "%s: sample outside its family %s" % (where, cur.name)
        key = (name, tuple(sorted(labels.items())))
        assert key not in seen_series, "%s: series twice" % where
        seen_series.add(key)
        if cur.type == "counter":
            assert value >= 0 and name.endswith("_total"), where
        if "le" in labels:
            assert name.endswith("_bucket"), "%s: le outside a bucket" % where
        cur.samples.append((name, labels, value))
    for fam in fams.values():
        assert fam.help is not None and fam.type is not None, "%s: HELP and TYPE" % fam.name
        if fam.type == "histogram":
            check_histogram(fam)
    return fams


def check_histogram(fam):
    groups = {}
    for name, labels, value in fam.samples:
        rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        g = groups.setdefault(rest, {"buckets": [], "sum": None, "count": None})
        if name.endswith("_bucket"):
            assert "le" in labels, "%s: bucket without le" % fam.name
            g["buckets"].append((parse_value(labels["le"], fam.name), value))
        elif name.endswith("_sum"):
            g["sum"] = value
        else:
            g["count"] = value
    for rest, g in groups.items():
        where = "%s%s" % (fam.name, dict(rest))
        b = g["buckets"]
        assert b and g["sum"] is not None and g["count"] is not None, where
        assert b[-1][0] == math.inf, "%s: the last bucket must be +Inf" % where
        for (le0, c0), (le1, c1) in zip(b, b[1:]):
            assert le1 > le0, "%s: le not increasing" % where
            assert c1 >= c0, "%s: buckets not cumulative" % where
        assert b[-1][1] == g["count"], "%s: +Inf bucket != _count" % where
        assert g["count"] == int(g["count"]), where


def value(fams, sample, default=0.0, **labels):
    """The value of one series (labels must match exactly), or default."""
    base = re.sub(r"_(bucket|sum|count)\Z", "", sample)
    fam = fams.get(sample) or fams.get(base)
    assert fam is not None, "no family for %s" % sample
    for name, l, v in fam.samples:
        if name == sample and l == labels:
            return v
    return default


def test_parser_rejects_what_it_must():
    good = ("# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n"
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
            "h_sum 3\nh_count 2\n")
    parse_metrics(good)
    bad = [
        good.replace("h_bucket{le=\"+Inf\"} 2", "h_bucket{le=\"+Inf\"} 0"),   # not cumulative
        good.replace("h_count 2", "h_count 3"),                               # +Inf != count
        good.replace("h_bucket{le=\"+Inf\"} 2\n", ""),                        # no +Inf
        good.replace("# TYPE a_total counter\n", ""),                         # no TYPE
        good + "a_total{x=\"2\"} 1\n",                                        # family split
        good.replace("a_total{x=\"1\"} 2", "a_total{x=\"1\"} 2 1700000000"),  # timestamp
        good.replace("x=\"1\"", "x=\"a\\q\""),                                # bad escape
        good.replace("x=\"1\"", "1x=\"1\""),                                  # bad label name
        good + "# a comment\n",
        good.replace("\n", "\n\n", 1),
        good + "# TYPE h histogram\n",                                        # TYPE twice
    ]
    for text in bad:
        with pytest.raises(AssertionError):
            parse_metrics(text)


# ---- the stack -------------------------------------------------------------

@pytest.fixture(scope="module")
def mstack():
    s = Stack()
    s.controller_metrics = "127.0.0.1:%d" % free_port()
    old = os.environ.get("ORCHARD_CONTROLLER_METRICS")
    os.environ["ORCHARD_CONTROLLER_METRICS"] = s.controller_metrics
    try:
        s.start()
    finally:
        if old is None:
            del os.environ["ORCHARD_CONTROLLER_METRICS"]
        else:
            os.environ["ORCHARD_CONTROLLER_METRICS"] = old
    yield s
    s.close()


@pytest.fixture(scope="module")
def madmin(mstack):
    return mstack.session()


@pytest.fixture(scope="module")
def msandbox(mstack, madmin):
    sid = mstack.new_sandbox(madmin)
    yield sid
    madmin.delete("%s/sandboxes/%s" % (mstack.url, sid))


def scrape_api(stack, session):
    r = session.get(stack.url + "/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == CONTENT_TYPE
    return parse_metrics(r.text)


def scrape_controller(stack):
    r = requests.get("http://%s/metrics" % stack.controller_metrics, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == CONTENT_TYPE
    return parse_metrics(r.text)


# ---- orchard-api -------------------------------------------------------------

API_FAMILIES = {
    "orchard_api_requests_total": "counter",
    "orchard_api_request_duration_seconds": "histogram",
    "orchard_api_auth_requests_total": "counter",
    "orchard_api_auth_duration_seconds": "histogram",
    "orchard_api_exec_duration_seconds": "histogram",
    "orchard_api_db_pool_size": "gauge",
    "orchard_api_db_pool_open": "gauge",
    "orchard_api_db_pool_in_use": "gauge",
    "orchard_api_db_pool_waits_total": "counter",
    "orchard_api_db_pool_timeouts_total": "counter",
    "orchard_api_db_statements_prepared_total": "counter",
    "orchard_api_db_prepared_executions_total": "counter",
    "orchard_api_connections_accepted_total": "counter",
    "orchard_api_key_verifications_total": "counter",
    "orchard_sandboxes": "gauge",
    "orchard_jobs": "gauge",
}
PROCESS_FAMILIES = {
    "orchard_build_info": "gauge",
    "process_cpu_seconds_total": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_virtual_memory_bytes": "gauge",
    "process_open_fds": "gauge",
    "process_max_fds": "gauge",
    "process_start_time_seconds": "gauge",
}
API_FAMILIES.update(PROCESS_FAMILIES)


def test_api_metrics_parse_and_declare_every_family(mstack, madmin):
    fams = scrape_api(mstack, madmin)
    assert {n: f.type for n, f in fams.items()} == API_FAMILIES
    # The auth subrequest of this scrape was counted before it, apart.
    assert value(fams, "orchard_api_auth_requests_total", endpoint="/_auth", status="204") >= 1
    assert value(fams, "orchard_api_auth_duration_seconds_count", endpoint="/_auth") >= 1
    for _, labels, _ in fams["orchard_api_requests_total"].samples:
        assert not labels["route"].startswith("/_auth"), labels
    assert value(fams, "orchard_api_db_pool_size") == 8     # ORCHARD_DB_POOL's default
    assert 0 <= value(fams, "orchard_api_db_pool_in_use") <= value(fams, "orchard_api_db_pool_open") <= 8


def test_api_metrics_need_an_admin_key(mstack):
    anon = mstack.anonymous().get(mstack.url + "/metrics")
    assert anon.status_code == 401
    user = mstack.session(key=mstack.new_tenant_key("metrics-user-" + uuid.uuid4().hex[:6]))
    r = user.get(mstack.url + "/metrics")
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "forbidden"
    bearer = mstack.session(bearer=True).get(mstack.url + "/v1/metrics")
    assert bearer.status_code == 200
    fams = parse_metrics(bearer.text)
    assert value(fams, "orchard_api_requests_total", route="/metrics", method="GET", status="403") >= 1


def test_three_execs_move_the_exec_histogram_by_three(mstack, madmin, msandbox):
    before = scrape_api(mstack, madmin)
    for _ in range(3):
        r = madmin.post("%s/sandboxes/%s/exec" % (mstack.url, msandbox),
                        json={"command": "echo hi", "wait": True})
        assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
    r = madmin.post("%s/sandboxes/%s/exec" % (mstack.url, msandbox),
                    json={"command": "exit 3", "wait": True})
    assert r.status_code == 200 and r.json()["status"] == "failed", r.text
    after = scrape_api(mstack, madmin)

    def delta(sample, **labels):
        return value(after, sample, **labels) - value(before, sample, **labels)

    assert delta("orchard_api_exec_duration_seconds_count", state="succeeded") == 3
    assert delta("orchard_api_exec_duration_seconds_count", state="failed") == 1
    assert delta("orchard_api_exec_duration_seconds_bucket", state="succeeded", le="+Inf") == 3
    assert delta("orchard_api_exec_duration_seconds_sum", state="succeeded") >= 0
    route = dict(route="/sandboxes/{id}/exec", method="POST")
    assert delta("orchard_api_requests_total", status="200", **route) == 4
    assert delta("orchard_api_request_duration_seconds_count", **route) == 4
    # One auth subrequest per request (the four execs and the second scrape).
    assert delta("orchard_api_auth_requests_total", endpoint="/_auth", status="204") == 5


def test_statuses_are_counted_by_route_pattern_never_by_raw_path(mstack, madmin):
    missing = "nosuch" + uuid.uuid4().hex[:8]
    before = scrape_api(mstack, madmin)
    assert madmin.get(mstack.url + "/no/such/" + missing).status_code == 404
    assert madmin.get("%s/sandboxes/%s" % (mstack.url, missing)).status_code == 404
    assert madmin.put(mstack.url + "/stats").status_code == 405
    r = madmin.get(mstack.url + "/metrics")
    after = parse_metrics(r.text)
    assert missing not in r.text

    def delta(**labels):
        return (value(after, "orchard_api_requests_total", **labels) -
                value(before, "orchard_api_requests_total", **labels))

    assert delta(route="unmatched", method="GET", status="404") == 1
    assert delta(route="/sandboxes/{id}", method="GET", status="404") == 1
    assert delta(route="/stats", method="PUT", status="405") == 1


def test_sandbox_and_job_gauges_match_the_database(mstack, madmin, msandbox):
    fams = scrape_api(mstack, madmin)
    db = dict(mstack.psql("SELECT state, count(*) FROM sandboxes WHERE state <> 'deleted'"
                          " GROUP BY state"))
    for state in ("pending", "ready", "failed", "deleting"):
        assert value(fams, "orchard_sandboxes", default=None, state=state) == int(db.get(state, 0))
    assert value(fams, "orchard_sandboxes", state="ready") >= 1
    for state in ("queued", "running"):
        assert value(fams, "orchard_jobs", default=None, state=state) is not None


def test_the_request_histogram_has_no_status_label(mstack, madmin):
    """Latency by route and method only: statuses multiply series by ten or
    more. The counter keeps them."""
    assert madmin.get(mstack.url + "/sandboxes/nosuch-hist").status_code == 404
    fams = scrape_api(mstack, madmin)
    hist = fams["orchard_api_request_duration_seconds"].samples
    assert hist and all(set(l) - {"le"} == {"route", "method"} for _, l, _ in hist), hist[:3]
    assert value(fams, "orchard_api_requests_total", route="/sandboxes/{id}", method="GET",
                 status="404") >= 1


def test_no_metric_calls_a_state_status(mstack, madmin):
    """One label name for states; status is only an HTTP status code."""
    fams = dict(scrape_api(mstack, madmin))
    fams.update(scrape_controller(mstack))
    for fam in fams.values():
        for _, labels, _ in fam.samples:
            if "status" in labels:
                assert re.match(r"[1-5]\d\d\Z", labels["status"]), (fam.name, labels)


def check_process_metrics(fams, component):
    assert value(fams, "orchard_build_info", version=VERSION, component=component) == 1
    assert len(fams["orchard_build_info"].samples) == 1
    assert value(fams, "process_cpu_seconds_total") > 0
    assert value(fams, "process_resident_memory_bytes") > 1 << 20
    assert value(fams, "process_virtual_memory_bytes") >= value(fams, "process_resident_memory_bytes")
    assert 3 <= value(fams, "process_open_fds") <= value(fams, "process_max_fds")
    start = value(fams, "process_start_time_seconds")
    assert time.time() - 86400 < start <= time.time() + 5, start


def test_api_process_metrics(mstack, madmin):
    fams = scrape_api(mstack, madmin)
    check_process_metrics(fams, "api")
    # They are the api's own: its /proc agrees (descriptors come and go with
    # requests, hence the slack).
    with open(os.path.join(mstack.run_dir, "api.pid")) as f:
        pid = int(f.read().split()[0])
    n = len(os.listdir("/proc/%d/fd" % pid))
    assert abs(value(fams, "process_open_fds") - n) <= 16, n


def test_controller_process_metrics(mstack):
    check_process_metrics(scrape_controller(mstack), "controller")


# ---- nginx -----------------------------------------------------------------

def test_nginx_stub_status_answers_on_loopback(mstack):
    r = mstack.anonymous().get(mstack.url + "/nginx_status")
    assert r.status_code == 200, r.text
    assert re.match(r"Active connections: \d+ \n"
                    r"server accepts handled requests\n \d+ \d+ \d+ \n"
                    r"Reading: \d+ Writing: \d+ Waiting: \d+ \n\Z", r.text), r.text


# ---- orchard-controller ------------------------------------------------------

CONTROLLER_FAMILIES = {
    "orchard_controller_reconcile_duration_seconds": "histogram",
    "orchard_controller_create_to_ready_seconds": "histogram",
    "orchard_controller_launch_to_ready_seconds": "histogram",
    "orchard_controller_driver_operations_total": "counter",
    "orchard_controller_driver_errors_total": "counter",
    "orchard_controller_driver_operation_duration_seconds": "histogram",
    "orchard_controller_sandboxes": "gauge",
    "orchard_controller_leader": "gauge",
}
CONTROLLER_FAMILIES.update(PROCESS_FAMILIES)


def test_controller_metrics_url_is_in_var_env(mstack):
    with open(os.path.join(mstack.var, "env")) as f:
        env = f.read()
    url = "http://%s/metrics" % mstack.controller_metrics
    assert "export ORCHARD_CONTROLLER_METRICS_URL=%s\n" % url in env
    assert "ORCHARD_CONTROLLER_METRICS=" not in env


def test_controller_metrics_parse_and_say_leader(mstack):
    fams = scrape_controller(mstack)
    assert {n: f.type for n, f in fams.items()} == CONTROLLER_FAMILIES
    assert value(fams, "orchard_controller_leader") == 1
    mstack.wait_for(lambda: value(scrape_controller(mstack),
                                  "orchard_controller_reconcile_duration_seconds_count",
                                  kind="sweep") >= 1, what="a sweep")


def test_a_new_sandbox_moves_create_to_ready(mstack, madmin):
    before = scrape_controller(mstack)
    r = madmin.post(mstack.url + "/sandboxes", json={"image": "host"})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    try:
        mstack.wait_ready(madmin, sid)

        def moved():
            after = scrape_controller(mstack)
            return after if value(after, "orchard_controller_create_to_ready_seconds_count") > \
                value(before, "orchard_controller_create_to_ready_seconds_count") else None

        after = mstack.wait_for(moved, timeout=30, what="create_to_ready to move")
        for h in ("orchard_controller_create_to_ready_seconds_count",
                  "orchard_controller_launch_to_ready_seconds_count"):
            assert value(after, h) - value(before, h) == 1, h
        op = dict(driver="local", op="create")
        assert value(after, "orchard_controller_driver_operations_total", **op) - \
            value(before, "orchard_controller_driver_operations_total", **op) == 1
        # The next sweep sees it ready, as the database does.
        mstack.wait_for(lambda: value(scrape_controller(mstack), "orchard_controller_sandboxes",
                                      state="ready") ==
                        int(mstack.scalar("SELECT count(*) FROM sandboxes WHERE state = 'ready'")),
                        timeout=30, what="the sweep's ready count")
    finally:
        madmin.delete("%s/sandboxes/%s" % (mstack.url, sid))


def raw_request(addr, data):
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(data)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks)


def test_controller_answers_only_get_metrics(mstack):
    base = "http://%s" % mstack.controller_metrics
    assert requests.get(base + "/", timeout=30).status_code == 404
    assert requests.get(base + "/metricsx", timeout=30).status_code == 404
    r = requests.post(base + "/metrics", timeout=30)
    assert r.status_code == 405 and r.headers["Allow"] == "GET"
    assert raw_request(mstack.controller_metrics, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    big = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n"
    assert raw_request(mstack.controller_metrics, big).startswith(b"HTTP/1.1 431 ")
    ok = raw_request(mstack.controller_metrics, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n")


def test_a_silent_client_does_not_stop_the_controller_endpoint(mstack):
    host, port = mstack.controller_metrics.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as idle:
        # Served after the idle connection's read deadline at the latest.
        fams = scrape_controller(mstack)
        assert "orchard_controller_leader" in fams
        idle.settimeout(30)
        assert idle.recv(100) == b""   # closed without an answer
