"""Admission control (issue 22, docs/controller.md "Admission").

The stack's controller reports a small capacity (2 cpus, no overcommit,
no reserve), so sandboxes of 1 cpu queue beyond the second. Sizes no node
can hold are refused at create; queued sandboxes keep status "pending",
are numbered in weighted fair-share order, fail with a clear reason when
their readiness timeout passes, and survive a SIGKILLed controller without
being admitted twice.
"""
import os
import signal

import pytest

from stack import Stack

SMALL = {"image": "host", "cpu": "1", "memory": "64Mi"}


@pytest.fixture(scope="module")
def small():
    s = Stack(env={"ORCHARD_CAPACITY_CPU": "2", "ORCHARD_CPU_OVERCOMMIT": "1",
                   "ORCHARD_CAPACITY_CPU_RESERVE": "0", "ORCHARD_CAPACITY_MEMORY": "4Gi",
                   "ORCHARD_CAPACITY_MEMORY_RESERVE": "0"})
    s.start()
    try:
        s.wait_for(lambda: s.scalar("SELECT cpu_millis FROM driver_capacity") == "2000",
                   timeout=60, what="the controller's capacity report")
        yield s
    finally:
        s.close()


def create(st, session, body=SMALL, **kw):
    r = session.post(st.url + "/v1/sandboxes", json=dict(body, **kw))
    assert r.status_code == 200, r.text
    return r.json()


def get(st, session, sid):
    r = session.get("%s/v1/sandboxes/%s" % (st.url, sid))
    assert r.status_code == 200, r.text
    return r.json()


def delete_all(st, session, ids):
    for sid in ids:
        session.delete("%s/v1/sandboxes/%s" % (st.url, sid))
    st.wait_for(lambda: st.scalar("SELECT count(*) FROM sandboxes WHERE state IN"
                                  " ('pending', 'ready', 'deleting')") == "0",
                timeout=90, what="every sandbox gone")


def delete_quietly(st, session, ids):
    for sid in ids:
        session.delete("%s/v1/sandboxes/%s" % (st.url, sid))


def admitted_live(st):
    return int(st.scalar("SELECT coalesce(sum(cpu_millis), 0) FROM sandboxes WHERE admitted_at"
                         " IS NOT NULL AND state IN ('pending', 'ready', 'deleting')"))


def test_a_size_no_node_can_hold_is_422_and_writes_nothing(small):
    s = small.session()
    res = s.get(small.url + "/v1/resources").json()
    assert res["admission"]["largest_node"]["cpu_millis"] == 2000, res["admission"]
    before = small.counts()
    for body in ({"image": "host", "cpu": "64"}, {"image": "host", "memory": "2Ti"}):
        r = s.post(small.url + "/v1/sandboxes", json=body)
        assert r.status_code == 422, r.text
        assert "larger than any node" in r.json()["detail"], r.text
    assert small.counts() == before


def test_queued_sandboxes_stay_pending_in_order_and_start_as_capacity_frees(small):
    s = small.session()
    first = [create(small, s)["sandbox_id"] for _ in range(2)]
    for sid in first:
        small.wait_ready(s, sid)
    queued = [create(small, s)["sandbox_id"] for _ in range(3)]
    small.wait_for(lambda: [get(small, s, q)["queue_position"] for q in queued] == [1, 2, 3],
                   timeout=60, what="queue positions 1, 2, 3")
    sb = get(small, s, queued[0])
    assert sb["status"] == "pending" and sb["queued"] is True and sb["queue_reason"], sb
    # /wait keeps waiting while queued: it times out still pending (408).
    r = s.get("%s/v1/sandboxes/%s/wait" % (small.url, queued[0]), params={"timeout": 2})
    assert r.status_code == 408, r.text
    assert admitted_live(small) == 2000
    s.delete("%s/v1/sandboxes/%s" % (small.url, first[0]))
    assert small.wait_ready(s, queued[0])["status"] == "ready"
    small.wait_for(lambda: [get(small, s, q)["queue_position"] for q in queued[1:]] == [1, 2],
                   timeout=60, what="the queue moving up")
    assert admitted_live(small) == 2000
    delete_all(small, s, first + queued)


def test_tenants_share_the_queue_by_weight(small):
    a = small.session()
    b = small.session(key=small.new_tenant_key("adm-b"))
    small.psql("UPDATE tenants SET weight = 1")
    hold = [create(small, a)["sandbox_id"] for _ in range(2)]
    for sid in hold:
        small.wait_ready(a, sid)
    qa = [create(small, a)["sandbox_id"] for _ in range(4)]
    qb = [create(small, b)["sandbox_id"] for _ in range(2)]
    # a holds all the capacity: b's sandboxes, created later, come first,
    # then the two tenants alternate.
    small.wait_for(lambda: get(small, b, qb[1])["queue_position"] is not None and
                   get(small, a, qa[3])["queue_position"] is not None,
                   timeout=60, what="positions")
    pos = {sid: get(small, a if sid in qa else b, sid)["queue_position"] for sid in qa + qb}
    order = sorted(pos, key=pos.get)
    assert order[:2] == qb or order[:3] == [qb[0], qa[0], qb[1]], (order, qa, qb)
    assert [x for x in order if x in qa] == qa        # in order within a tenant
    res = b.get(small.url + "/v1/resources").json()
    assert res["tenant"]["queued"] == 2 and res["admission"]["queued"] == 6, res
    delete_quietly(small, b, qb)
    delete_all(small, a, hold + qa)


def test_a_queued_create_fails_when_its_timeout_passes(small):
    s = small.session()
    hold = [create(small, s)["sandbox_id"] for _ in range(2)]
    for sid in hold:
        small.wait_ready(s, sid)
    late = create(small, s, timeout=3)["sandbox_id"]
    sb = small.wait_for(lambda: (lambda x: x if x["status"] == "failed" else None)(get(small, s, late)),
                        timeout=60, what="the queued sandbox failing")
    assert "queued" in sb["status_message"] and "3 seconds" in sb["status_message"], sb
    delete_all(small, s, hold)


def test_a_killed_controller_loses_no_queued_sandbox_and_admits_none_twice(small):
    s = small.session()
    ids = [create(small, s)["sandbox_id"] for _ in range(6)]
    small.wait_for(lambda: small.scalar("SELECT count(*) FROM sandboxes WHERE state = 'ready'") == "2",
                   timeout=90, what="two admitted and ready")
    pidfile = os.path.join(small.run_dir, "controller.pid")
    os.kill(int(open(pidfile).read().split()[0]), signal.SIGKILL)
    assert admitted_live(small) == 2000
    small.up()                      # starts the controller again
    done = []
    for _ in range(len(ids)):
        ready = small.wait_for(lambda: [i for i in ids if i not in done and
                                        get(small, s, i)["status"] == "ready"],
                               timeout=90, what="the next sandbox ready")
        assert admitted_live(small) <= 2000           # never oversubscribed
        s.delete("%s/v1/sandboxes/%s" % (small.url, ready[0]))
        done.append(ready[0])
    assert sorted(done) == sorted(ids)
    launched = small.psql("SELECT sandbox_id, count(*) FROM events WHERE kind = 'sandbox.ready'"
                          " AND sandbox_id IN (%s) GROUP BY 1" % ",".join("'%s'" % i for i in ids))
    assert sorted(r[0] for r in launched) == sorted(ids) and {r[1] for r in launched} == {"1"}
    delete_all(small, s, [])


def test_a_quota_429_names_the_quota_and_says_when_to_retry(small):
    admin = small.session()
    assert admin.post(small.url + "/v1/tenants", json={"name": "adm-q", "max_sandboxes": 1}).status_code == 201
    s = small.session(key=small.new_tenant_key("adm-q"))
    first = create(small, s)["sandbox_id"]
    r = s.post(small.url + "/v1/sandboxes", json=SMALL)
    assert r.status_code == 429 and r.json()["code"] == "quota_exceeded", r.text
    assert "max_sandboxes" in r.json()["detail"] and int(r.headers["Retry-After"]) > 0, r.headers
    delete_all(small, s, [first])
