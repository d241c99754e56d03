"""Per-tenant rate limits (issue 25, "The API"; docs/configuration.md,
ORCHARD_API_RATE_LIMIT): off by default; when set, a tenant past its burst
gets 429 rate_limited with Retry-After, and every answer carries the
RateLimit-* headers. Another tenant is not affected.
"""
import time

import pytest

from stack import Stack
from test_api import assert_error

PER_MINUTE, BURST = 6, 3     # one token every 10 s


@pytest.fixture(scope="module")
def limited():
    s = Stack(env={"ORCHARD_API_RATE_LIMIT": str(PER_MINUTE), "ORCHARD_API_RATE_BURST": str(BURST)})
    s.start()
    yield s
    s.close()


def test_off_by_default(stack, admin):
    r = admin.get(stack.url + "/v1/sandboxes")
    assert r.status_code == 200
    assert "RateLimit-Limit" not in r.headers and "RateLimit-Remaining" not in r.headers


def test_a_tenant_past_its_burst_gets_429_and_others_do_not(limited):
    a = limited.session()
    b = limited.session(key=limited.new_tenant_key("ratelim-b"))
    remaining = []
    for _ in range(BURST):
        r = a.get(limited.url + "/v1/sandboxes")
        assert r.status_code == 200, r.text
        assert r.headers["RateLimit-Limit"] == str(BURST)
        remaining.append(int(r.headers["RateLimit-Remaining"]))
        assert 0 <= int(r.headers["RateLimit-Reset"]) <= BURST * 60 // PER_MINUTE
    # each request took a token (one may have come back meanwhile)
    assert remaining == sorted(remaining, reverse=True) and remaining[0] == BURST - 1
    while True:       # use up whatever refilled while the machine was slow
        r = a.get(limited.url + "/v1/sandboxes")
        if r.status_code != 200:
            break
    body = assert_error(r, 429, "rate_limited")
    assert "retry after" in body["detail"]
    retry = int(r.headers["Retry-After"])
    assert 1 <= retry <= 60 // PER_MINUTE + 1
    assert r.headers["RateLimit-Remaining"] == "0"
    # another tenant has its own bucket
    assert b.get(limited.url + "/v1/sandboxes").status_code == 200
    # public routes are not counted
    assert limited.anonymous().get(limited.url + "/health").status_code == 200
    # after Retry-After, a token is there again
    time.sleep(retry)
    r = a.get(limited.url + "/v1/sandboxes")
    assert r.status_code == 200, r.text
