"""What a wrong key costs, and what it tells (issue 19, item 13).

A key id that does not exist used to be refused without an argon2 check
(5 ms) while a known id with a wrong secret paid for one (80 ms): the time
told which key ids exist. Now an unknown id is checked against a dummy hash.
orchard_api_key_verifications_total counts the checks, so the test needs
no clock: each kind of wrong key costs exactly one.
"""
import re
import secrets
import subprocess

import fcgi_client


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
