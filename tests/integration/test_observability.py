"""Observability (docs/observability.md, issue 11): the dashboard views of
sql/migrations/004_dashboards.sql, the Grafana dashboard's SQL,
`orchard-admin stats`, `orchardctl stats`, retention (`orchard-admin
prune`, lib/prune.c) and the JSON-lines logs of our processes.

A scenario is seeded for a tenant of its own: sandboxes and execs with
known sleeps and exit codes through the real API (one sandbox fails: its
image does not exist), plus rows with fixed old timestamps written with
SQL (sandboxes deleted in 2021 with their jobs and events, and one deleted
ten days ago). Every figure a view returns for that tenant is checked
against what the scenario implies. The prune test comes last: it removes
the 2021 rows.
"""
import http.server
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from stack import PSQL, REPO

RUN = uuid.uuid4().hex[:8]
TENANT = "obs-" + RUN
MISSING_IMAGE = "obs-missing-" + RUN
DASHBOARD = os.path.join(REPO, "docs", "dashboards", "orchard.json")
VIEWS = ["dash_active_sandboxes", "dash_exec_latency_hourly", "dash_failure_reasons",
         "dash_tenant_usage", "dash_slowest_commands"]
TOL = 0.002                          # seconds: API timestamps are rounded to microseconds


def utc(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)


def ts(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc)


# The rows written with SQL. Days and hours are UTC; every old sandbox was
# deleted in 2021, so retention (30 days) removes all of them.
OLD_SANDBOXES = {
    # name: (created_at, deleted_at)
    "old1": (utc("2021-03-01T06:00:00"), utc("2021-03-02T12:00:00")),
    "old2": (utc("2021-03-01T20:00:00"), utc("2021-03-01T22:00:00")),
    "old3": (utc("2021-03-02T23:00:00"), utc("2021-03-03T01:00:00")),
    "old4": (utc("2021-03-10T10:00:00"), utc("2021-03-10T11:00:00")),
    "old5": (utc("2021-03-10T12:00:00"), utc("2021-03-10T13:00:00")),
}
OLD_JOBS = [
    # (sandbox, suffix, command (JSON), started_at, seconds, status, exit_code)
    ("old1", "j1", '"make test"', utc("2021-03-01T07:00:00"), 2.0, "succeeded", 0),
    ("old1", "j2", '["python3", "train.py"]', utc("2021-03-02T08:00:00"), 4.0, "failed", 7),
    ("old2", "j3", '"ls"', utc("2021-03-01T21:00:00"), 1.0, "succeeded", 0),
    ("old3", "j4", '"true"', utc("2021-03-03T00:30:00"), 0.5, "succeeded", 0),
]
OLD_EVENTS_EACH = 3


def percentile_cont(values, p):
    v = sorted(values)
    pos = p * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def rows(stack, sql):
    """A query's rows as dicts (psql's JSON, so types survive)."""
    out = stack.psql("SET TimeZone = 'UTC'; SELECT coalesce(json_agg(q), '[]')::jsonb FROM (%s) q" % sql)
    return json.loads(out[0][0])


class Scenario:
    def __init__(self, stack):
        self.stack = stack
        self.key = stack.new_tenant_key(TENANT)
        self.session = stack.session(key=self.key)
        self.tenant_id = int(stack.scalar("SELECT id FROM tenants WHERE name = '%s'" % TENANT))
        self.jobs = []               # the API's finished job objects
        self.ids = {}                # name -> sandbox id

    def sid(self, name):
        return "obs%s-%s" % (RUN, name)

    def create(self, name, image="host"):
        r = self.session.post(self.stack.url + "/sandboxes",
                              json={"image": image, "cpu": "0.5", "memory": "256Mi"})
        return r

    def execute(self, sandbox, command, timeout=None):
        body = {"command": command, "wait": True}
        if timeout:
            body["timeout_seconds"] = timeout
        r = self.session.post("%s/sandboxes/%s/exec" % (self.stack.url, sandbox), json=body)
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["status"] in ("succeeded", "failed"), job
        job["seconds"] = job["completed_at"] - job["started_at"]
        self.jobs.append(job)
        return job

    def seed_api(self):
        st = self.stack
        for name in ("a", "b", "c"):
            r = self.create(name)
            assert r.status_code in (200, 201), r.text
            self.ids[name] = r.json()["sandbox_id"]
        for name in ("a", "b", "c"):
            info = st.wait_ready(self.session, self.ids[name])
            assert info.get("status") == "ready", info
        a, b = self.ids["a"], self.ids["b"]
        self.sleep = self.execute(a, "sleep 0.4")
        self.exit3 = self.execute(a, "exit 3")
        self.argv = self.execute(a, ["sleep", "0.2"])
        self.timeout = self.execute(a, "sleep 5", timeout=1)
        self.execute(b, "sleep 0.8")
        self.execute(b, "true")
        # A sandbox whose image does not exist fails (the controller says why);
        # an API that refuses it up front gets the same row written by hand.
        r = self.create("f", image=MISSING_IMAGE)
        if r.status_code in (200, 201):
            self.ids["f"] = r.json()["sandbox_id"]
            st.wait_for(lambda: st.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % self.ids["f"])
                        == "failed", timeout=60, what="the sandbox with a missing image to fail")
        else:
            assert 400 <= r.status_code < 500, r.text
            self.ids["f"] = self.sid("f")
            st.psql("INSERT INTO sandboxes (id, tenant_id, image, state, state_message, cpu, memory,"
                    " cpu_millis, memory_bytes, agent_token) VALUES ('%s', %d, '%s', 'failed',"
                    " 'image %s is not available', '0.5', '256Mi', 500, 268435456, 'x')"
                    % (self.ids["f"], self.tenant_id, MISSING_IMAGE, MISSING_IMAGE))
        r = self.session.delete("%s/sandboxes/%s" % (st.url, self.ids["c"]))
        assert r.status_code in (200, 202, 204), r.text
        st.wait_for(lambda: st.scalar("SELECT state FROM sandboxes WHERE id = '%s'" % self.ids["c"])
                    == "deleted", timeout=60, what="the deleted sandbox to be torn down")

    def seed_sql(self):
        st, t = self.stack, self.tenant_id
        values = []
        for name, (created, deleted) in OLD_SANDBOXES.items():
            values.append("('%s', %d, 'old-image', 'deleted', '1', '1Gi', 1000, 1073741824, 'x',"
                          " '%s', '%s')" % (self.sid(name), t, created.isoformat(), deleted.isoformat()))
        # Deleted ten days ago: inside retention, and exactly 24 sandbox-hours.
        values.append("('%s', %d, 'old-image', 'deleted', '1', '1Gi', 1000, 1073741824, 'x',"
                      " now() - interval '11 days', now() - interval '10 days')" % (self.sid("recent"), t))
        st.psql("INSERT INTO sandboxes (id, tenant_id, image, state, cpu, memory, cpu_millis,"
                " memory_bytes, agent_token, created_at, deleted_at) VALUES " + ", ".join(values))
        values = []
        for sb, suffix, command, started, seconds, status, code in OLD_JOBS:
            completed = started + timedelta(seconds=seconds)
            values.append("('%s', '%s', %d, '%s', '%s', %d, '%s', '%s', '%s')" % (
                self.sid(suffix), self.sid(sb), t, command, status, code, started.isoformat(),
                started.isoformat(), completed.isoformat()))
        values.append("('%s', '%s', %d, '\"echo recent\"', 'succeeded', 0, now() - interval '10 days',"
                      " now() - interval '10 days', now() - interval '10 days' + interval '3 seconds')"
                      % (self.sid("jr"), self.sid("recent"), t))
        st.psql("INSERT INTO jobs (id, sandbox_id, tenant_id, command, status, exit_code, created_at,"
                " started_at, completed_at) VALUES " + ", ".join(values))
        values = []
        for name, (created, deleted) in OLD_SANDBOXES.items():
            for i, kind in enumerate(("sandbox.create", "sandbox.ready", "sandbox.delete")[:OLD_EVENTS_EACH]):
                values.append("('%s', %d, '%s', '%s')" % (
                    self.sid(name), t, kind, (created + timedelta(minutes=i)).isoformat()))
        for kind in ("sandbox.create", "sandbox.delete"):
            values.append("('%s', %d, '%s', now() - interval '10 days')" % (self.sid("recent"), t, kind))
        st.psql("INSERT INTO events (sandbox_id, tenant_id, kind, created_at) VALUES " + ", ".join(values))


@pytest.fixture(scope="module")
def scenario(stack):
    sc = Scenario(stack)
    sc.seed_api()
    sc.seed_sql()
    return sc


def tenant_rows(stack, view, sc, order="1"):
    return rows(stack, "SELECT * FROM %s WHERE tenant_id = %d ORDER BY %s" % (view, sc.tenant_id, order))


# ---- the views ---------------------------------------------------------------

def test_active_sandboxes_by_tenant_image_and_state(stack, scenario):
    got = {(r["image"], r["state"]): r for r in tenant_rows(stack, "dash_active_sandboxes", scenario)}
    # a and b are ready; c and the old ones are deleted; f failed.
    assert set(got) == {("host", "ready"), (MISSING_IMAGE, "failed")}, got
    ready = got[("host", "ready")]
    assert ready["tenant"] == TENANT and ready["sandboxes"] == 2
    assert ready["cpu_millis"] == 1000 and ready["memory_bytes"] == 2 * 256 * 1024 * 1024
    assert got[(MISSING_IMAGE, "failed")]["sandboxes"] == 1


def expected_latency(sc):
    """Per UTC hour: the run times of the tenant's finished execs."""
    hours = {}
    for job in sc.jobs:
        hour = ts(job["completed_at"]).replace(minute=0, second=0, microsecond=0)
        hours.setdefault(hour, []).append((job["seconds"], job["status"]))
    for _, _, _, started, seconds, status, _ in OLD_JOBS:
        hour = (started + timedelta(seconds=seconds)).replace(minute=0, second=0, microsecond=0)
        hours.setdefault(hour, []).append((seconds, status))
    return hours


def test_exec_latency_percentiles_per_hour(stack, scenario):
    got = tenant_rows(stack, "dash_exec_latency_hourly", scenario)
    want = expected_latency(scenario)
    recent = utc("2021-04-01T00:00:00")
    # The row of the recent (ten days ago) job is checked by count only.
    by_hour = {datetime.fromisoformat(r["hour"]): r for r in got}
    assert sum(r["execs"] for r in got) == sum(len(v) for v in want.values()) + 1, got
    for hour, runs in want.items():
        r = by_hour.get(hour)
        assert r, "no row for %s in %s" % (hour, got)
        secs = [s for s, _ in runs]
        assert r["tenant"] == TENANT
        assert r["execs"] == len(runs) and r["failed"] == sum(1 for _, st in runs if st == "failed"), r
        for p, col in ((0.5, "p50_seconds"), (0.9, "p90_seconds"), (0.99, "p99_seconds")):
            assert abs(r[col] - percentile_cont(secs, p)) < TOL, (hour, col, r, secs)
        assert abs(r["max_seconds"] - max(secs)) < TOL
    # The known sleeps bound the API's run times.
    assert 0.4 <= scenario.sleep["seconds"] < 10 and 0.2 <= scenario.argv["seconds"] < 10
    assert scenario.timeout["timed_out"] is True and 1 <= scenario.timeout["seconds"] < 10
    # Nobody else has 2021 jobs: the all-tenants rows of those hours are ours.
    total = rows(stack, "SELECT * FROM dash_exec_latency_hourly WHERE tenant_id IS NULL"
                        " AND hour < '%s' ORDER BY hour" % recent.isoformat())
    ours = [r for r in got if datetime.fromisoformat(r["hour"]) < recent]
    assert [(r["hour"], r["execs"], r["p50_seconds"]) for r in total] == \
        [(r["hour"], r["execs"], r["p50_seconds"]) for r in ours]
    # A filter on the hour reaches the expression index (no full scan of jobs).
    plan = "\n".join(x[0] for x in stack.psql(
        "SET enable_seqscan = off; EXPLAIN SELECT * FROM dash_exec_latency_hourly"
        " WHERE hour >= now() - interval '24 hours'"))
    assert "jobs_completed_hour_idx" in plan and "Index Cond" in plan, plan


def test_failure_reasons_last_24h_and_all(stack, scenario):
    got = {(r["source"], r["reason"]): r for r in tenant_rows(stack, "dash_failure_reasons", scenario)}
    sandbox = [k for k in got if k[0] == "sandbox"]
    assert len(sandbox) == 1 and MISSING_IMAGE in sandbox[0][1], got
    timeout_reason = scenario.timeout["error"]
    assert timeout_reason and "timed out" in timeout_reason.lower()
    want = {sandbox[0]: (1, 1), ("job", "exit code 3"): (1, 1), ("job", timeout_reason): (1, 1),
            ("job", "exit code 7"): (0, 1)}
    assert {k: (r["last_24h"], r["total"]) for k, r in got.items()} == want
    assert got[("job", "exit code 7")]["last_failed_at"].startswith("2021-03-02T08:00:04")
    assert all(r["tenant"] == TENANT for r in got.values())


def day_split(t0, t1):
    """Seconds of [t0, t1) in each UTC day it touches."""
    out = {}
    day = datetime(t0.year, t0.month, t0.day, tzinfo=timezone.utc)
    while True:
        nxt = day + timedelta(days=1)
        out[day] = max(0.0, (min(t1, nxt) - max(t0, day)).total_seconds())
        if nxt > t1:
            return out
        day = nxt


def test_tenant_usage_per_day(stack, scenario):
    got = {datetime.fromisoformat(r["day"]): r for r in tenant_rows(stack, "dash_tenant_usage", scenario)}
    # 2021, exactly: old1 18 h + 12 h, old2 2 h, old3 1 h + 1 h.
    for day, hours, created, execs, secs in (("2021-03-01", 20.0, 2, 2, 3.0), ("2021-03-02", 13.0, 1, 1, 4.0),
                                             ("2021-03-03", 1.0, 0, 1, 0.5)):
        r = got[utc(day + "T00:00:00")]
        assert abs(r["sandbox_hours"] - hours) < 1e-9, r
        assert (r["sandboxes_created"], r["execs"]) == (created, execs), r
        assert abs(r["exec_seconds"] - secs) < 1e-9, r
    # The sandbox deleted ten days ago lived exactly 24 hours, over two days.
    now = datetime.now(timezone.utc)
    window = [r for d, r in got.items() if now - timedelta(days=12) < d < now - timedelta(days=8)]
    assert abs(sum(r["sandbox_hours"] for r in window) - 24.0) < 1e-6, window
    # Today's figures from the API's sandboxes and jobs, split by an
    # independent computation over the rows' own timestamps.
    lives = stack.psql("SELECT extract(epoch FROM created_at), extract(epoch FROM coalesce(deleted_at, now()))"
                       " FROM sandboxes WHERE tenant_id = %d AND created_at > now() - interval '2 days'"
                       % scenario.tenant_id)
    want = {}
    for t0, t1 in lives:
        for day, secs in day_split(ts(float(t0)), ts(float(t1))).items():
            want[day] = want.get(day, 0.0) + secs / 3600
    got = {datetime.fromisoformat(r["day"]): r for r in tenant_rows(stack, "dash_tenant_usage", scenario)}
    for day, hours in want.items():
        assert abs(got[day]["sandbox_hours"] - hours) < 0.01, (day, got[day], hours)
    recent = [r for d, r in got.items() if d > now - timedelta(days=2)]
    assert sum(r["sandboxes_created"] for r in recent) == 4          # a, b, c, f
    assert sum(r["execs"] for r in recent) == len(scenario.jobs)
    assert abs(sum(r["exec_seconds"] for r in recent) - sum(j["seconds"] for j in scenario.jobs)) < 6 * TOL


def test_slowest_commands(stack, scenario):
    got = tenant_rows(stack, "dash_slowest_commands", scenario, order="duration_seconds DESC, job_id")
    want = {j["job_id"]: j["seconds"] for j in scenario.jobs}
    want.update({scenario.sid(s): secs for _, s, _, _, secs, _, _ in OLD_JOBS})
    want[scenario.sid("jr")] = 3.0
    assert {r["job_id"] for r in got} == set(want)
    for r in got:
        assert abs(r["duration_seconds"] - want[r["job_id"]]) < TOL, r
        assert r["tenant"] == TENANT
    durations = [r["duration_seconds"] for r in got]
    assert durations == sorted(durations, reverse=True)
    top = got[0]
    assert (top["job_id"], top["command"], top["status"], top["exit_code"], top["sandbox_id"], top["image"]) == \
        (scenario.sid("j2"), "python3 train.py", "failed", 7, scenario.sid("old1"), "old-image")
    by_id = {r["job_id"]: r for r in got}
    assert by_id[scenario.argv["job_id"]]["command"] == "sleep 0.2"
    assert by_id[scenario.timeout["job_id"]]["timed_out"] is True
    assert by_id[scenario.sleep["job_id"]]["sandbox_id"] == scenario.ids["a"]
    # "Top n by duration" can walk the expression index instead of sorting every job.
    plan = "\n".join(x[0] for x in stack.psql(
        "SET enable_seqscan = off; EXPLAIN SELECT * FROM dash_slowest_commands"
        " ORDER BY duration_seconds DESC LIMIT 10"))
    assert "Index Scan Backward using jobs_duration_idx" in plan, plan


# ---- the Grafana dashboard ---------------------------------------------------

GRAFANA_RANGE = ("'2021-02-28T00:00:00Z'::timestamptz", "now()")


def grafana_sql(sql, tenants):
    """A panel's SQL as Grafana would send it, for a range from 2021 to now."""
    lo, hi = GRAFANA_RANGE
    sql = re.sub(r"\$__timeFilter\(([^)]*)\)", lambda m: "(%s BETWEEN %s AND %s)" % (m.group(1), lo, hi), sql)
    sql = re.sub(r"\$__timeGroupAlias\(([^,]*),\s*'?(\d+)h'?\)",
                 lambda m: "to_timestamp(floor(extract(epoch FROM %s) / %d) * %d) AS time"
                 % (m.group(1), int(m.group(2)) * 3600, int(m.group(2)) * 3600), sql)
    sql = sql.replace("$__timeFrom()", lo).replace("$__timeTo()", hi)
    sql = sql.replace("$tenant", ", ".join("'%s'" % t for t in tenants))
    assert "$" not in sql, "a Grafana macro this test does not know: %s" % sql
    return sql


def dashboard_targets(dash):
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def test_grafana_dashboard_is_valid_and_every_query_runs(stack, scenario):
    with open(DASHBOARD) as f:
        dash = json.load(f)
    assert [i["name"] for i in dash["__inputs"]] == ["DS_POSTGRES"]
    assert dash["__inputs"][0]["pluginId"] == "postgres"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and len(ids) >= len(VIEWS)
    used = set()
    targets = list(dashboard_targets(dash))
    assert targets
    for panel, target in targets:
        for ds in (panel["datasource"], target["datasource"]):
            assert ds == {"type": "postgres", "uid": "${DS_POSTGRES}"}, panel["title"]
        sql = target["rawSql"]
        relations = re.findall(r"\b(?:FROM|JOIN)\s+([a-z_][a-z0-9_]*)", sql, re.I)
        assert relations and all(r.startswith("dash_") for r in relations), (panel["title"], relations)
        used.update(relations)
        assert target["format"] in ("table", "time_series")
        result = rows(stack, grafana_sql(sql, [TENANT, "default"]))
        if panel["type"] in ("table", "timeseries"):
            assert result, "panel %r returned no rows for the scenario" % panel["title"]
        if target["format"] == "time_series":
            assert "time" in result[0], panel["title"]
    assert set(VIEWS) <= used, set(VIEWS) - used
    for var in dash["templating"]["list"]:
        assert var["datasource"]["uid"] == "${DS_POSTGRES}"
        names = [r["tenant"] for r in rows(stack, var["query"])]
        assert TENANT in names


# ---- stats -------------------------------------------------------------------

def admin_stats(stack, *args):
    r = stack.admin("stats", *args, check=False)
    return r


def test_admin_stats_json_matches_the_views(stack, scenario):
    r = admin_stats(stack, "--tenant", TENANT, "-o", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tenant"] == TENANT and doc["hours"] == 24 and doc["days"] == 7
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", doc["generated_at"])
    assert sorted((a["image"], a["state"], a["sandboxes"]) for a in doc["active_sandboxes"]) == \
        sorted([("host", "ready", 2), (MISSING_IMAGE, "failed", 1)])
    # Only the last 24 hours: the API's execs, not 2021's or ten days ago's.
    assert sum(h["execs"] for h in doc["exec_latency_hourly"]) == len(scenario.jobs)
    slow = doc["slowest_commands"]
    assert [s["job_id"] for s in slow] == [j["job_id"] for j in
                                           sorted(scenario.jobs, key=lambda j: -j["seconds"])][:10]
    assert all(set(s) == {"job_id", "sandbox_id", "tenant", "command", "duration_seconds", "status",
                          "exit_code", "timed_out", "completed_at"} for s in slow)
    reasons = {(f["source"], f["reason"]): (f["last_24h"], f["total"]) for f in doc["failure_reasons"]}
    assert reasons[("job", "exit code 3")] == (1, 1) and reasons[("job", "exit code 7")] == (0, 1)
    assert [f["last_24h"] for f in doc["failure_reasons"]] == \
        sorted((f["last_24h"] for f in doc["failure_reasons"]), reverse=True)
    usage = doc["tenant_usage"]
    assert usage and all(u["tenant"] == TENANT and not u["day"].startswith("2021") for u in usage)
    assert sum(u["execs"] for u in usage) == len(scenario.jobs)
    # Without --tenant: every tenant, ours among them.
    r = admin_stats(stack, "-o", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tenant"] is None
    assert any(a["tenant"] == TENANT for a in doc["active_sandboxes"])


def test_admin_stats_table_and_errors(stack, scenario):
    r = admin_stats(stack, "--tenant", TENANT)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("Orchard stats for tenant %s at " % TENANT)
    for title in ("Active sandboxes", "Exec latency per hour", "Slowest commands", "Failure reasons",
                  "Usage per tenant and day"):
        assert "\n%s" % title in out, title
    assert re.search(r"^TENANT\s+IMAGE\s+STATE\s+SANDBOXES", out, re.M)
    assert re.search(r"^job\s+%s\s+exit code 3\s+1\s+1\s" % re.escape(TENANT), out, re.M), out
    assert re.search(r"^%s\s+host\s+ready\s+2\s+1000\s" % re.escape(TENANT), out, re.M), out
    r = admin_stats(stack, "--tenant", "no-such-tenant-" + RUN)
    assert r.returncode == 1 and 'no tenant "no-such-tenant-' in r.stderr
    r = admin_stats(stack, "-o", "yaml")
    assert r.returncode == 2 and "-o wants table or json" in r.stderr


def without_running_hours(doc, other):
    """doc with every "sandbox_hours" that is within 0.01 h of other's set to
    other's: the two documents were made moments apart, and a sandbox still
    running adds to its hours in between (rounded to 0.001 h = 3.6 s)."""
    if isinstance(doc, dict) and isinstance(other, dict):
        out = {}
        for k, v in doc.items():
            o = other.get(k)
            if k == "sandbox_hours" and isinstance(v, (int, float)) and isinstance(o, (int, float)) \
                    and abs(v - o) <= 0.01:
                out[k] = o
            else:
                out[k] = without_running_hours(v, o)
        return out
    if isinstance(doc, list) and isinstance(other, list) and len(doc) == len(other):
        return [without_running_hours(a, b) for a, b in zip(doc, other)]
    return doc


def test_orchardctl_stats(stack, scenario, admin):
    """GET /v1/stats: the same document as orchard-admin stats (a server
    without the route is covered by the fake server below)."""
    api = admin.get(stack.url + "/v1/stats", params={"tenant": TENANT})
    r = stack.orchardctl("stats", "--tenant", TENANT, "-o", "json")
    assert api.status_code == 200, api.text
    assert r.returncode == 0, r.stderr
    mine = json.loads(admin_stats(stack, "--tenant", TENANT, "-o", "json").stdout)
    got = json.loads(r.stdout)
    for doc in (mine, got):
        doc.pop("generated_at")
    assert without_running_hours(got, mine) == mine
    # A tenant's own key sees its own figures only.
    own = scenario.session.get(stack.url + "/v1/stats")
    assert own.status_code == 200 and own.json()["tenant"] == TENANT
    r = stack.orchardctl("stats")
    assert r.returncode == 0 and "Active sandboxes" in r.stdout, r.stderr


def test_orchardctl_stats_usage_errors(stack):
    for args, msg in ((["stats", "-o", "xml"], "-o wants table, wide, json, yaml or jsonpath=EXPR"),
                      (["stats", "--tenant", "Not_A_Name"], "--tenant wants a tenant name"),
                      (["stats", "extra"], 'unexpected argument "extra"')):
        r = stack.orchardctl(*args)
        assert r.returncode == 125 and msg in r.stderr, (args, r.stderr)


class FakeStats:
    """An HTTP server answering GET /v1/stats with a fixed body (None: no route)."""

    def __init__(self, body):
        outer = self
        self.body, self.paths = body, []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.paths.append(self.path)
                if outer.body is None:
                    status, data = 404, b'{"detail": "no route for GET /v1/stats", "code": "not_found"}'
                else:
                    status, data = 200, outer.body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def ctl_against(body, *args):
    """Run orchardctl against a FakeStats serving body; (result, request paths)."""
    fake = FakeStats(body)
    home = tempfile.mkdtemp(prefix="obs-home-", dir="/tmp")
    try:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "ORCHARD_URL": fake.url,
               "ORCHARD_API_KEY": "orch_0123456789ab_" + "f" * 40}
        r = subprocess.run([os.path.join(REPO, "bin", "orchardctl")] + list(args), env=env,
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        return r, fake.paths
    finally:
        fake.close()
        shutil.rmtree(home, ignore_errors=True)


def steady_sections(text):
    """A stats table without what moves while we look: the first line (the
    time) and today's usage (sandbox-hours of live sandboxes grow)."""
    sections = text.split("\n\n")[1:]
    return [s for s in sections if not s.startswith("Usage per tenant and day")]


def test_orchardctl_stats_prints_what_orchard_admin_prints(stack, scenario):
    """For the same document, orchardctl's tables are orchard-admin's; the
    tenant goes in the query; JSON is passed through; no route is "not
    supported"; control characters from the server do not reach the terminal."""
    raw = admin_stats(stack, "--tenant", TENANT, "-o", "json").stdout
    table, paths = ctl_against(raw, "stats", "--tenant", TENANT)
    assert table.returncode == 0, table.stderr
    assert paths == ["/v1/stats?tenant=" + TENANT]
    mine = admin_stats(stack, "--tenant", TENANT)
    assert steady_sections(table.stdout) == steady_sections(mine.stdout)
    assert len(steady_sections(mine.stdout)) == 4
    as_json, paths = ctl_against(raw, "stats", "-o", "json")
    assert as_json.returncode == 0 and paths == ["/v1/stats"]
    assert json.loads(as_json.stdout) == json.loads(raw)

    doc = json.loads(raw)
    doc["failure_reasons"].append({"source": "job", "tenant": TENANT, "reason": "x\x1b[31m" + "y" * 80,
                                   "last_24h": 0, "total": 1, "last_failed_at": None})
    r, _ = ctl_against(json.dumps(doc), "stats")
    assert r.returncode == 0 and "\x1b" not in r.stdout and "x?[31m" + "y" * 54 + "..." in r.stdout

    r, _ = ctl_against(None, "stats")
    assert r.returncode == 125 and "stats is not supported by this server" in r.stderr, r.stderr


# ---- logs --------------------------------------------------------------------

LOG_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def test_every_log_line_of_ours_is_json(stack, scenario):
    """api.log, controller.log and each live sandbox's agent.log: one JSON
    object per line with time, level, component and msg. (nginx's,
    PostgreSQL's and admin.log, orchard-admin's human output, are not ours.)"""
    logdir = os.path.join(stack.var, "log")
    files = [os.path.join(logdir, "api.log"), os.path.join(logdir, "controller.log")]
    sbdir = os.path.join(stack.var, "sandboxes")
    for name in sorted(os.listdir(sbdir)) if os.path.isdir(sbdir) else []:
        path = os.path.join(sbdir, name, "agent.log")
        if os.path.isfile(path):
            files.append(path)
    assert len(files) > 2, "no agent.log of a live sandbox under %s" % sbdir
    bad = []
    counted = {}
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        counted[path] = len(lines)
        for n, raw in enumerate(lines, 1):
            try:
                o = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                bad.append("%s:%d: not JSON (%s): %r" % (path, n, e, raw[:200]))
                continue
            problems = []
            if not isinstance(o, dict):
                problems.append("not an object")
            else:
                if not isinstance(o.get("time"), str) or not LOG_TIME.match(o["time"]):
                    problems.append("time")
                if o.get("level") not in ("debug", "info", "warn", "error"):
                    problems.append("level")
                if not isinstance(o.get("component"), str) or not o["component"]:
                    problems.append("component")
                if not isinstance(o.get("msg"), str) or not o["msg"]:
                    problems.append("msg")
            if problems:
                bad.append("%s:%d: bad %s: %r" % (path, n, ", ".join(problems), raw[:200]))
    assert counted[files[0]] > 0 and counted[files[1]] > 0, counted
    assert not bad, "%d log lines are not our JSON format:\n%s" % (len(bad), "\n".join(bad[:40]))


# ---- retention (last: it removes the 2021 rows) --------------------------------

def old_counts(stack):
    """What retention at 30 days would remove, in all tenants, counted independently."""
    row = stack.psql(
        "WITH s AS (SELECT id FROM sandboxes WHERE state = 'deleted' AND deleted_at < now() - interval '30 days')"
        " SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM jobs WHERE sandbox_id IN (SELECT id FROM s)),"
        " (SELECT count(*) FROM events WHERE sandbox_id IN (SELECT id FROM s))")[0]
    return tuple(int(x) for x in row)


def mine(stack, sc, names):
    ids = ", ".join("'%s'" % sc.sid(n) for n in names)
    row = stack.psql("SELECT (SELECT count(*) FROM sandboxes WHERE id IN (%s)),"
                     " (SELECT count(*) FROM jobs WHERE sandbox_id IN (%s)),"
                     " (SELECT count(*) FROM events WHERE sandbox_id IN (%s))" % (ids, ids, ids))[0]
    return tuple(int(x) for x in row)


PRUNED = re.compile(r"^pruned (\d+) sandboxes, (\d+) jobs, (\d+) events in (\d+) batches of at most (\d+) rows")


def test_prune_usage_errors(stack):
    for args, msg in ((["--days", "0"], "--days wants 1 to 36500"), (["--batch", "x"], "--batch wants"),
                      (["extra"], 'unexpected argument "extra"')):
        r = stack.admin("prune", *args, check=False)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    r = subprocess.run([os.path.join(REPO, "bin", "orchard-admin"), "prune", "--dry-run"],
                       env=dict(stack.env(), ORCHARD_RETENTION_DAYS="soon"), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "ORCHARD_RETENTION_DAYS" in r.stderr


def test_prune_removes_only_old_deleted_sandboxes_in_batches(stack, scenario):
    sc = scenario
    old = list(OLD_SANDBOXES)
    seeded = (len(old), len(OLD_JOBS), len(old) * OLD_EVENTS_EACH)
    assert mine(stack, sc, old) == seeded
    keep_ids = [sc.ids[n] for n in ("a", "b", "c", "f")]
    ids = ", ".join("'%s'" % i for i in keep_ids + [sc.sid("recent")])
    kept_sql = ("SELECT (SELECT count(*) FROM sandboxes WHERE id IN (%s)), (SELECT count(*) FROM jobs"
                " WHERE sandbox_id IN (%s)), (SELECT count(*) FROM events WHERE sandbox_id IN (%s))"
                % (ids, ids, ids))
    kept_before = stack.psql(kept_sql)[0]
    totals_sql = "SELECT (SELECT count(*) FROM sandboxes), (SELECT count(*) FROM jobs), (SELECT count(*) FROM events)"
    totals_before = [int(x) for x in stack.psql(totals_sql)[0]]
    want = old_counts(stack)
    assert all(w >= n for w, n in zip(want, seeded)), (want, seeded)

    r = stack.admin("prune", "--dry-run")
    assert r.stdout.startswith("would prune %d sandboxes, %d jobs, %d events" % want), r.stdout
    assert mine(stack, sc, old) == seeded, "a dry run deleted rows"

    # Another transaction holds one of old3's events: pruning skips it (and
    # so old3's row) instead of waiting, and the next run finishes the job.
    locked = stack.scalar("SELECT min(id) FROM events WHERE sandbox_id = '%s'" % sc.sid("old3"))
    app = "obs-locker-" + RUN
    locker = subprocess.Popen([PSQL, "%s application_name=%s" % (stack.database_url, app), "-X", "-q"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        locker.stdin.write("BEGIN;\nSELECT id FROM events WHERE id = %s FOR UPDATE;\n" % locked)
        locker.stdin.flush()
        stack.wait_for(lambda: stack.scalar(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = '%s' AND state = 'idle in transaction'"
            " AND query LIKE '%%FOR UPDATE%%'" % app), timeout=30, what="the row lock")
        started = time.monotonic()
        r = stack.admin("prune", "--batch", "2")
        took = time.monotonic() - started
    finally:
        locker.stdin.write("COMMIT;\n")
        locker.stdin.close()
        locker.wait(timeout=30)
    m = PRUNED.match(r.stdout)
    assert m, r.stdout
    sandboxes, jobs, events, batches, size = (int(x) for x in m.groups())
    assert (sandboxes, jobs, events, size) == (want[0] - 1, want[1], want[2] - 1, 2), r.stdout
    # At most two rows per transaction, and no more transactions than that needs.
    assert batches == sum((n + 1) // 2 for n in (sandboxes, jobs, events)), r.stdout
    assert took < 30, "prune waited on the locked row (%.1fs)" % took
    assert mine(stack, sc, [n for n in old if n != "old3"]) == (0, 0, 0)
    assert mine(stack, sc, ["old3"]) == (1, 0, 1)

    r = stack.admin("prune", "--batch", "2")
    assert PRUNED.match(r.stdout).groups()[:3] == ("1", "0", "1"), r.stdout
    assert mine(stack, sc, old) == (0, 0, 0)
    # Everything else is still there: live, just deleted and inside retention.
    assert stack.psql(kept_sql)[0] == kept_before
    totals_after = [int(x) for x in stack.psql(totals_sql)[0]]
    assert totals_after == [b - w for b, w in zip(totals_before, want)], (totals_before, totals_after, want)
    r = stack.admin("prune")
    assert PRUNED.match(r.stdout).groups()[:4] == ("0", "0", "0", "0"), r.stdout
    # The views no longer see 2021.
    assert not [u for u in tenant_rows(stack, "dash_tenant_usage", sc) if u["day"].startswith("2021")]
