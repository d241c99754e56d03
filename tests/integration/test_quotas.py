"""Tenant quotas beyond max_sandboxes (issue 22, docs/controller.md "Quotas"):
total cpu and memory in use, sandboxes queued, creates per minute. Each
refusal is a 429 naming its quota with Retry-After, creates nothing, and
applies to a batch as a whole; GET /v1/resources shows each quota against
the tenant's use. Set through PATCH /v1/tenants/{name}.

On test_admission's small stack (2 cpus, no overcommit), so queueing is
deterministic.
"""
import pytest

from test_admission import SMALL, delete_all, small as st  # noqa: F401

TINY = dict(SMALL, cpu="100m")


def tenant(st, name, **quotas):
    admin = st.session()
    r = admin.post(st.url + "/v1/tenants", json=dict(name=name, **quotas))
    assert r.status_code == 201, r.text
    return st.session(key=st.new_tenant_key(name))


def rows(st, name):
    return int(st.scalar("SELECT count(*) FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
                         " WHERE t.name = '%s'" % name))


def refused(st, r, quota, name, before):
    assert r.status_code == 429 and r.json()["code"] == "quota_exceeded", r.text
    assert quota in r.json()["detail"], r.text
    assert 1 <= int(r.headers["Retry-After"]) <= 60, r.headers
    assert rows(st, name) == before


def create(st, s, body=TINY, count=None):
    if count is None:
        return s.post(st.url + "/v1/sandboxes", json=body)
    return s.post(st.url + "/v1/sandboxes/batch", json=dict(body, count=count))


def ids_of(r):
    j = r.json()
    return j["sandbox_ids"] if "sandbox_ids" in j else [j["sandbox_id"]]


def test_total_cpu_and_memory_apply_to_a_batch_as_a_whole(st):
    s = tenant(st, "q-total", max_total_cpu_millis=1500, max_total_memory_bytes=200 << 20)
    refused(st, create(st, s, SMALL, count=2), "max_total_cpu_millis", "q-total", 0)
    refused(st, create(st, s, dict(TINY, memory="128Mi"), count=2), "max_total_memory_bytes",
            "q-total", 0)
    ok = create(st, s, SMALL)
    assert ok.status_code == 200, ok.text
    refused(st, create(st, s, dict(SMALL, cpu="600m")), "max_total_cpu_millis", "q-total", 1)
    more = create(st, s, dict(SMALL, cpu="500m"))
    assert more.status_code == 200, more.text
    res = s.get(st.url + "/v1/resources").json()["tenant"]
    assert res["quotas"]["max_total_cpu_millis"] == {"limit": 1500, "used": 1500}, res
    assert res["quotas"]["max_total_memory_bytes"] == {"limit": 200 << 20, "used": 128 << 20}, res
    assert res["quotas"]["max_sandboxes"] == {"limit": None, "used": 2}, res
    delete_all(st, s, ids_of(ok) + ids_of(more))


def test_max_queued_counts_the_sandboxes_waiting_for_capacity(st):
    s = tenant(st, "q-queue", max_queued=1)
    refused(st, create(st, s, SMALL, count=2), "max_queued", "q-queue", 0)
    hold = []
    for _ in range(2):      # one at a time: each is queued until admitted
        hold.append(create(st, s, SMALL))
        assert hold[-1].status_code == 200, hold[-1].text
        st.wait_ready(s, hold[-1].json()["sandbox_id"])
    queued = create(st, s, SMALL)          # the capacity is full: it waits
    assert queued.status_code == 200, queued.text
    st.wait_for(lambda: s.get("%s/v1/sandboxes/%s" % (st.url, queued.json()["sandbox_id"]))
                .json()["queued"], timeout=60, what="the third sandbox queued")
    refused(st, create(st, s, SMALL), "max_queued", "q-queue", 3)
    res = s.get(st.url + "/v1/resources").json()["tenant"]
    assert res["quotas"]["max_queued"] == {"limit": 1, "used": 1} and res["usage"]["queued"] == 1, res
    delete_all(st, s, [r.json()["sandbox_id"] for r in hold + [queued]])


def test_the_create_rate_says_when_to_retry(st):
    s = tenant(st, "q-rate", max_creates_per_minute=3)
    first = create(st, s, count=2)
    assert first.status_code == 201, first.text
    refused(st, create(st, s, count=2), "max_creates_per_minute", "q-rate", 2)
    one = create(st, s)
    assert one.status_code == 200, one.text
    refused(st, create(st, s), "max_creates_per_minute", "q-rate", 3)
    # a batch larger than the quota can never fit: the full window
    r = create(st, s, count=4)
    refused(st, r, "max_creates_per_minute", "q-rate", 3)
    assert r.headers["Retry-After"] == "60"
    # deleting does not give creates back
    delete_all(st, s, ids_of(first) + ids_of(one))
    refused(st, create(st, s), "max_creates_per_minute", "q-rate", 3)
    res = s.get(st.url + "/v1/resources").json()["tenant"]
    assert res["quotas"]["max_creates_per_minute"] == {"limit": 3, "used": 3}, res


def test_quotas_are_set_read_and_removed_through_the_tenants_api(st):
    admin = st.session()
    tenant(st, "q-set")
    url = st.url + "/v1/tenants/q-set"
    r = admin.patch(url, json={"max_total_cpu_millis": 4000, "max_total_memory_bytes": 1 << 30,
                               "max_queued": 10, "max_creates_per_minute": 120})
    assert r.status_code == 200, r.text
    t = admin.get(url).json()
    assert (t["max_total_cpu_millis"], t["max_total_memory_bytes"], t["max_queued"],
            t["max_creates_per_minute"]) == (4000, 1 << 30, 10, 120), t
    assert t["max_sandboxes"] is None
    r = admin.patch(url, json={"max_queued": None})
    assert r.status_code == 200 and r.json()["max_queued"] is None and r.json()["max_creates_per_minute"] == 120
    for bad in ({"max_queued": -1}, {"max_creates_per_minute": "9"}, {"max_total_cpu_millis": 0},
                {"max_cpus": 3}):
        r = admin.patch(url, json=bad)
        assert r.status_code == 422, (bad, r.text)
    assert admin.get(url).json()["max_creates_per_minute"] == 120


@pytest.mark.parametrize("quota", ["max_sandboxes", "max_cpu_millis", "max_memory_bytes",
                                   "max_total_cpu_millis", "max_total_memory_bytes", "max_queued",
                                   "max_creates_per_minute"])
def test_each_429_names_its_quota(st, quota):
    limit = {"max_cpu_millis": 50, "max_memory_bytes": 32 << 20, "max_total_cpu_millis": 150,
             "max_total_memory_bytes": 100 << 20}.get(quota, 1)
    name = "q-" + quota.replace("_", "-")
    s = tenant(st, name, **{quota: limit})
    if quota not in ("max_cpu_millis", "max_memory_bytes"):
        r = create(st, s)
        assert r.status_code == 200, r.text
    before = rows(st, name)
    refused(st, create(st, s, count=2), quota, name, before)
    delete_all(st, s, [x[0] for x in st.psql(
        "SELECT s.id FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id WHERE t.name = '%s'"
        " AND s.state IN ('pending', 'ready')" % name)])


def test_orchardctl_tenants_sets_the_new_quotas(st):
    r = st.orchardctl("tenants", "create", "q-cli", "--max-total-cpu", "2", "--max-queued", "5",
                      "-o", "json")
    assert r.returncode == 0, r.stderr
    r = st.orchardctl("tenants", "set", "q-cli", "--max-total-memory", "1Gi",
                      "--max-creates-per-minute", "30", "--max-queued", "none", "-o", "json")
    assert r.returncode == 0, r.stderr
    t = st.session().get(st.url + "/v1/tenants/q-cli").json()
    assert (t["max_total_cpu_millis"], t["max_total_memory_bytes"], t["max_queued"],
            t["max_creates_per_minute"]) == (2000, 1 << 30, None, 30), t
    r = st.orchardctl("tenants", "set", "q-cli", "--max-queued", "lots")
    assert r.returncode == 125 and 'invalid --max-queued "lots"' in r.stderr, r.stderr


def test_forks_count_against_the_same_quotas(st):
    import rollout_helpers
    s = tenant(st, "q-fork", max_total_cpu_millis=300)
    parent = create(st, s)
    assert parent.status_code == 200, parent.text
    pid = parent.json()["sandbox_id"]
    st.wait_ready(s, pid)
    ck = rollout_helpers.checkpoint(st, s, pid)
    st.wait_for(lambda: s.get("%s/v1/checkpoints/%s" % (st.url, ck["id"])).json()["state"] == "ready",
                timeout=120, what="the checkpoint")
    r = s.post("%s/v1/checkpoints/%s/fork" % (st.url, ck["id"]), json={"count": 3})
    refused(st, r, "max_total_cpu_millis", "q-fork", 1)
    r = s.post("%s/v1/checkpoints/%s/fork" % (st.url, ck["id"]), json={"count": 2})
    assert r.status_code == 200, r.text
    delete_all(st, s, [pid] + r.json()["sandbox_ids"])


def test_the_weight_is_set_through_the_api_and_never_null(st):
    admin = st.session()
    s = tenant(st, "q-weight")
    url = st.url + "/v1/tenants/q-weight"
    assert admin.get(url).json()["weight"] == 1
    r = admin.patch(url, json={"weight": 3})
    assert r.status_code == 200 and r.json()["weight"] == 3, r.text
    assert s.get(st.url + "/v1/resources").json()["tenant"]["weight"] == 3
    for bad in ({"weight": None}, {"weight": 0}, {"weight": 1001}, {"weight": "2"}):
        r = admin.patch(url, json=bad)
        assert r.status_code == 422 and "weight" in r.json()["detail"], (bad, r.text)
    assert admin.get(url).json()["weight"] == 3
    r = admin.post(st.url + "/v1/tenants", json={"name": "q-weight2", "weight": 5})
    assert r.status_code == 201 and r.json()["weight"] == 5, r.text
    r = st.orchardctl("tenants", "set", "q-weight", "--weight", "2")
    assert r.returncode == 0, r.stderr
    assert admin.get(url).json()["weight"] == 2
