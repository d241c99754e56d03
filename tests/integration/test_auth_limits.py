"""What a wrong key costs, and what it tells (issue 19, items 9 and 13).

A key id that does not exist used to be refused without an argon2 check
(5 ms) while a known id with a wrong secret paid for one (80 ms): the time
told which key ids exist. Now an unknown id is checked against a dummy hash.
orchard_api_key_verifications_total counts the checks, so the test needs
no clock: each kind of wrong key costs exactly one.

Failed checks are limited per key id and per client address (a burst of
ORCHARD_API_AUTH_FAILURES, ten times that per address, refilled over a
minute): past it a wrong key is refused without argon2, while a key
already verified keeps working. The module has its own stack with a small
burst, so other files' wrong keys do not use it up.
"""
import re
import secrets
import subprocess

import pytest

import fcgi_client
from stack import Stack

BURST = 2


@pytest.fixture(scope="module")
def stack():
    s = Stack(env={"ORCHARD_API_AUTH_FAILURES": str(BURST)})
    s.start()
    yield s
    s.close()


def verifications(stack):
    """The counter, read straight from the api's socket with nginx's params:
    through nginx the admin key's own check (once its cache entry expires)
    would count too."""
    params = {"REQUEST_METHOD": "GET", "DOCUMENT_URI": "/metrics", "SCRIPT_NAME": "/metrics",
              "REQUEST_URI": "/metrics", "QUERY_STRING": "", "CONTENT_TYPE": "",
              "CONTENT_LENGTH": "", "ORCHARD_TENANT": "1", "ORCHARD_KEY": "1",
              "ORCHARD_ROLE": "admin"}
    status, _, body = fcgi_client.call(stack.api_socket, params)
    assert status == 200, body
    m = re.search(r"^orchard_api_key_verifications_total (\S+)$", body.decode(), re.M)
    assert m, "orchard_api_key_verifications_total missing from /metrics"
    return float(m.group(1))


def curl_status(stack, key):
    r = subprocess.run(["curl", "-sS", "--max-time", "60", "--cacert", stack.cacert,
                        "-H", "X-API-Key: " + key, "-o", "/dev/null", "-w", "%{http_code}",
                        stack.url + "/v1/sandboxes"], capture_output=True, text=True, timeout=90)
    return r.stdout


def random_secret():
    return secrets.token_hex(20)   # 40 characters, as a real secret


def test_an_unknown_key_id_costs_an_argon2_check_like_a_known_one(stack):
    known_id = stack.admin_key.split("_")[1]
    unknown_id = secrets.token_hex(6)
    assert unknown_id != known_id
    for key_id in (unknown_id, known_id):
        before = verifications(stack)
        key = "orch_%s_%s" % (key_id, random_secret())
        assert curl_status(stack, key) == "403"
        assert verifications(stack) == before + 1, key_id


def test_failed_checks_of_one_key_id_are_limited(stack):
    key = stack.new_tenant_key("limits")
    assert curl_status(stack, key) == "200"
    key_id = key.split("_")[1]
    before = verifications(stack)
    for _ in range(10):
        assert curl_status(stack, "orch_%s_%s" % (key_id, random_secret())) == "403"
    spent = verifications(stack) - before
    # BURST, plus what refilled meanwhile (one per 30 s); without a limit, 10.
    assert BURST <= spent <= BURST + 2, spent
    # The key itself, already verified, still works.
    assert curl_status(stack, key) == "200"


def test_failed_checks_from_one_address_are_limited(stack):
    before = verifications(stack)
    for _ in range(40):
        assert curl_status(stack, "orch_%s_%s" % (secrets.token_hex(6), random_secret())) == "403"
    spent = verifications(stack) - before
    # At most the address's burst (10 * BURST) and a few refills; without a limit, 40.
    assert spent <= 10 * BURST + 6, spent
