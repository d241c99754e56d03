"""One tenant cannot hold every api thread (issue 19, item 2).

Long requests (a job /wait, exec wait:true, a slow raw upload) hold a
request thread until they answer. A tenant may have at most
ORCHARD_API_TENANT_THREADS of them in flight (default three quarters of
ORCHARD_API_THREADS); past that it gets 429 at once. The test runs more
long waits of one tenant than the api has threads and shows another
tenant's request answered while they are all still pending.
"""
import concurrent.futures

import pytest

from stack import Stack

THREADS = 8   # the default share: 6 for one tenant
WAITS = THREADS + 4


@pytest.fixture(scope="module")
def small():
    s = Stack(env={"ORCHARD_API_THREADS": str(THREADS)})
    s.start()
    yield s
    s.close()


def test_another_tenant_is_served_while_one_holds_long_waits(small):
    a = small.session()
    b = small.session(key=small.new_tenant_key("fair-b"))
    r = a.post(small.url + "/v1/sandboxes", json={"image": "host"}, timeout=120)
    assert r.status_code in (200, 201), r.text
    box = r.json()["sandbox_id"]
    small.wait_ready(a, box)
    r = a.post("%s/v1/sandboxes/%s/exec" % (small.url, box),
               json={"command": "sleep 300", "wait": False}, timeout=120)
    assert r.status_code == 200, r.text
    job = r.json()["job_id"]

    pool = concurrent.futures.ThreadPoolExecutor(WAITS)
    try:
        waits = [pool.submit(small.session().get, "%s/v1/jobs/%s/wait" % (small.url, job),
                             params={"timeout": 60}, timeout=240) for _ in range(WAITS)]
        # Past its share the tenant is told at once: 429.
        small.wait_for(lambda: sum(1 for w in waits if w.done()) >= WAITS - (THREADS - THREADS // 4),
                       timeout=120, what="the waits past the tenant's share answered")
        refused = [w.result() for w in waits if w.done()]
        assert refused and all(x.status_code == 429 for x in refused), \
            [(x.status_code, x.text) for x in refused]
        assert refused[0].json()["code"], refused[0].text
        # Another tenant still gets a thread while every wait above is pending.
        r = b.get(small.url + "/v1/sandboxes", timeout=90)
        assert r.status_code == 200, r.text
        pending = [w for w in waits if not w.done()]
        assert len(pending) == THREADS - THREADS // 4, len(pending)
    finally:
        # The tenant's own delete waits for a share too: retried until the
        # waits time out.
        small.wait_for(lambda: a.delete("%s/v1/sandboxes/%s" % (small.url, box),
                                        timeout=120).status_code != 429,
                       timeout=300, interval=2, what="the sandbox deleted")
        pool.shutdown(wait=True)
