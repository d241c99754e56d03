"""Batch create, the label selector and the batch wait (issue 22,
docs/controller.md "Batch create").

The stack's controller reports 2 cpus (no overcommit, no reserve), so a
batch of three 1-cpu sandboxes has two ready and one queued: the batch wait
can then be both satisfied (ready=2) and timed out (ready=3) without a
race. Quotas apply to a batch as a whole, through the real stack.
"""
import pytest

# The small-capacity stack of test_admission (2 cpus) and its clean-up.
from test_admission import SMALL as SPEC, delete_all, small as st  # noqa: F401


def batch(st, session, count, headers=None, **kw):
    return session.post(st.url + "/v1/sandboxes/batch", json=dict(SPEC, count=count, **kw),
                        headers=headers or {})


def tenant_rows(st, tenant):
    return int(st.scalar("SELECT count(*) FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
                         " WHERE t.name = '%s'" % tenant))


def test_a_batch_answers_its_ids_at_once_and_the_wait_follows_them(st):
    s = st.session()
    r = batch(st, s, 3, labels={"exp": "b1"})
    assert r.status_code == 201, r.text
    b = r.json()
    ids = b["sandbox_ids"]
    assert b["count"] == 3 and len(ids) == 3 and len(set(ids)) == 3, b
    assert [x["sandbox_id"] for x in b["sandboxes"]] == ids
    assert {x["status"] for x in b["sandboxes"]} == {"pending"}
    assert st.scalar("SELECT count(*) FROM sandboxes WHERE batch_id = '%s'" % b["batch_id"]) == "3"
    # two fit the capacity, the third is queued: ready=2 is satisfied ...
    w = s.get("%s/v1/sandboxes/batch/%s/wait" % (st.url, b["batch_id"]),
              params={"ready": 2, "timeout": 120}, timeout=150)
    assert w.status_code == 200, w.text
    w = w.json()
    assert w["satisfied"] is True and w["timed_out"] is False and w["ready"] >= 2, w
    assert sorted(x["sandbox_id"] for x in w["sandboxes"]) == sorted(ids)
    # ... all three are not, while the third waits for capacity
    w = s.get("%s/v1/sandboxes/batch/%s/wait" % (st.url, b["batch_id"]), params={"timeout": 2}).json()
    assert w == dict(w, satisfied=False, timed_out=True, ready=2, pending=1, want_ready=3), w
    # deleting one ready sandbox admits the queued one: the whole batch is ready
    ready = [x["sandbox_id"] for x in w["sandboxes"] if x["status"] == "ready"]
    s.delete("%s/v1/sandboxes/%s" % (st.url, ready[0]))
    w = s.get("%s/v1/sandboxes/batch/%s/wait" % (st.url, b["batch_id"]),
              params={"ready": 2, "timeout": 120}, timeout=150).json()
    assert w["satisfied"] is True and w["deleted"] == 1, w
    # all three can no longer be ready: the wait answers at once, unsatisfied
    w = s.get("%s/v1/sandboxes/batch/%s/wait" % (st.url, b["batch_id"]),
              params={"timeout": 120}, timeout=150).json()
    assert w["satisfied"] is False and w["timed_out"] is False, w
    delete_all(st, s, ids)


def test_the_label_selector_finds_a_batch(st):
    s = st.session()
    one = s.post(st.url + "/v1/sandboxes", json=dict(SPEC, cpu="100m", labels={"exp": "other"}))
    assert one.status_code == 200, one.text
    b = batch(st, s, 4, cpu="100m", labels={"exp": "sel", "group": "g1"}).json()
    r = s.get(st.url + "/v1/sandboxes", params={"label": "exp=sel"})
    assert r.status_code == 200, r.text
    assert sorted(x["sandbox_id"] for x in r.json()["sandboxes"]) == sorted(b["sandbox_ids"])
    r = s.get(st.url + "/v1/sandboxes", params=[("label", "exp=sel"), ("label", "group=g1"),
                                                ("limit", "2")])
    page = r.json()
    assert len(page["sandboxes"]) == 2 and page["next_cursor"], page
    assert s.get(st.url + "/v1/sandboxes", params={"label": "exp=nope"}).json()["sandboxes"] == []
    assert s.get(st.url + "/v1/sandboxes", params={"label": "exp"}).status_code == 422
    delete_all(st, s, b["sandbox_ids"] + [one.json()["sandbox_id"]])


def test_a_retried_batch_creates_nothing_new(st):
    s = st.session(key=st.new_tenant_key("bt-idem"))
    h = {"Idempotency-Key": "batch-retry-1"}
    first = batch(st, s, 3, headers=h, cpu="100m")
    assert first.status_code == 201, first.text
    again = batch(st, s, 3, headers=h, cpu="100m")
    assert again.status_code == 201, again.text
    assert again.headers.get("Idempotent-Replayed") == "true", again.headers
    assert again.json()["batch_id"] == first.json()["batch_id"]
    assert again.json()["sandbox_ids"] == first.json()["sandbox_ids"]
    assert tenant_rows(st, "bt-idem") == 3
    # the same key with another body is a client bug: 422, nothing created
    other = batch(st, s, 4, headers=h, cpu="100m")
    assert other.status_code == 422, other.text
    assert tenant_rows(st, "bt-idem") == 3
    # a single create's key space is its own
    single = s.post(st.url + "/v1/sandboxes", json=dict(SPEC, cpu="100m"), headers=h)
    assert single.status_code == 200 and single.json()["sandbox_id"] not in first.json()["sandbox_ids"]
    delete_all(st, s, first.json()["sandbox_ids"] + [single.json()["sandbox_id"]])


@pytest.mark.parametrize("body", [
    dict(SPEC, count=0), dict(SPEC, count=1001), dict(SPEC, count="3"), dict(SPEC, count=2.5),
    dict(SPEC), dict(SPEC, count=2, sandbox_id="mine"), dict(SPEC, count=2, cpu="lots"),
    dict(SPEC, count=2, labels=["a"]), {"count": 2}, dict(SPEC, count=2, cpu="64"),
])
def test_bad_batches_are_422_and_create_nothing(st, body):
    s = st.session(key=st.new_tenant_key("bt-bad"))
    r = s.post(st.url + "/v1/sandboxes/batch", json=body)
    assert r.status_code == 422 and r.json()["code"] == "invalid", r.text
    assert r.json()["detail"], r.text
    assert tenant_rows(st, "bt-bad") == 0
    assert st.scalar("SELECT count(*) FROM sandbox_batches b JOIN tenants t ON t.id = b.tenant_id"
                     " WHERE t.name = 'bt-bad'") == "0"


def test_a_batch_over_quota_creates_nothing(st):
    admin = st.session()
    assert admin.post(st.url + "/v1/tenants", json={"name": "bt-q", "max_sandboxes": 3}).status_code == 201
    s = st.session(key=st.new_tenant_key("bt-q"))
    r = batch(st, s, 4, cpu="100m")
    assert r.status_code == 429 and r.json()["code"] == "quota_exceeded", r.text
    assert "max_sandboxes" in r.json()["detail"] and int(r.headers["Retry-After"]) > 0, r.headers
    assert tenant_rows(st, "bt-q") == 0
    ok = batch(st, s, 3, cpu="100m")
    assert ok.status_code == 201, ok.text
    r = batch(st, s, 1, cpu="100m")
    assert r.status_code == 429 and "max_sandboxes" in r.json()["detail"], r.text
    assert tenant_rows(st, "bt-q") == 3
    delete_all(st, s, ok.json()["sandbox_ids"])


def test_another_tenants_batch_is_not_found(st):
    s = st.session()
    b = batch(st, s, 1, cpu="100m").json()
    other = st.session(key=st.new_tenant_key("bt-other"))
    r = other.get("%s/v1/sandboxes/batch/%s/wait" % (st.url, b["batch_id"]), params={"timeout": 0})
    assert r.status_code == 404, r.text
    assert s.get("%s/v1/sandboxes/batch/%s/wait" % (st.url, "0123456789abcdef"),
                 params={"timeout": 0}).status_code == 404
    r = s.get("%s/v1/sandboxes/batch/%s/wait" % (st.url, b["batch_id"]), params={"ready": 2})
    assert r.status_code == 422, r.text
    r = s.get("%s/v1/sandboxes/batch/%s/wait" % (st.url, b["batch_id"]), params={"ready": "x"})
    assert r.status_code == 422, r.text
    delete_all(st, s, b["sandbox_ids"])


def test_orchardctl_create_n_makes_one_batch(st):
    r = st.orchardctl("create", "-n", "3", "--cpu", "100m", "--memory", "64Mi", "-l", "exp=cli",
                      "--wait", "--timeout", "120", timeout=180)
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split()
    assert len(ids) == 3 and len(set(ids)) == 3, r.stdout
    assert st.scalar("SELECT count(DISTINCT batch_id) FROM sandboxes WHERE id IN (%s)"
                     % ",".join("'%s'" % i for i in ids)) == "1"
    s = st.session()
    listed = s.get(st.url + "/v1/sandboxes", params={"label": "exp=cli"}).json()["sandboxes"]
    assert sorted(x["sandbox_id"] for x in listed) == sorted(ids)
    assert {x["status"] for x in listed} == {"ready"}, listed
    delete_all(st, s, ids)


@pytest.mark.parametrize("args, says", [
    (["-n", "0"], "--count wants 1 to 1000"),
    (["-n", "1001"], "--count wants 1 to 1000"),
    (["-n", "2", "--name", "x"], "--name and --count exclude each other"),
])
def test_orchardctl_create_n_refuses_bad_counts(st, args, says):
    before = st.scalar("SELECT count(*) FROM sandboxes")
    r = st.orchardctl("create", *args)
    assert r.returncode == 125 and says in r.stderr, (r.returncode, r.stderr)
    assert st.scalar("SELECT count(*) FROM sandboxes") == before
