"""HTTP conventions of the API that clients we did not write rely on
(issue 25, "The API"): Idempotency-Key bound to its body, replayed answers
marked; through requests and curl against the real stack.
"""
import subprocess
import uuid

from test_api import assert_error, q


def unique(prefix="http"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def test_idempotency_key_with_another_body_is_refused_on_create(stack, admin):
    key = unique("idem")
    before = stack.counts()
    first = admin.post(stack.url + "/v1/sandboxes", json={"image": "host", "cpu": "1"},
                       headers={"Idempotency-Key": key})
    assert first.status_code == 200, first.text
    sid = first.json()["sandbox_id"]
    try:
        assert "Idempotent-Replayed" not in first.headers
        # the same body again: the first sandbox, marked as a replay
        again = admin.post(stack.url + "/v1/sandboxes", json={"image": "host", "cpu": "1"},
                           headers={"Idempotency-Key": key})
        assert again.status_code == 200, again.text
        assert again.json()["sandbox_id"] == sid
        assert again.headers["Idempotent-Replayed"] == "true"
        # another body with the same key: 422 naming the key, nothing created
        other = admin.post(stack.url + "/v1/sandboxes", json={"image": "host", "cpu": "2"},
                           headers={"Idempotency-Key": key})
        body = assert_error(other, 422)
        assert key in body["detail"] and "different request body" in body["detail"], body
        assert "Idempotent-Replayed" not in other.headers
        after = stack.counts()
        assert after["sandboxes"] == before["sandboxes"] + 1
        # keys are per tenant: another tenant may use the same key freely
    finally:
        admin.delete("%s/v1/sandboxes/%s" % (stack.url, sid))


def test_idempotency_key_with_another_body_is_refused_on_exec(stack, admin, sandbox):
    key = unique("idem")
    url = "%s/v1/sandboxes/%s/exec" % (stack.url, sandbox)
    first = admin.post(url, json={"command": "echo one", "wait": True}, headers={"Idempotency-Key": key})
    assert first.status_code == 200, first.text
    assert "Idempotent-Replayed" not in first.headers
    # curl, byte for byte the same body: the first job, marked
    out = subprocess.run(["curl", "-sS", "-D", "-", "--cacert", stack.cacert, "-H",
                          "X-API-Key: " + stack.admin_key, "-H", "Idempotency-Key: " + key,
                          "-H", "Content-Type: application/json",
                          "--data-binary", first.request.body, url],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    head, _, body = out.stdout.partition("\n\n")  # text mode reads CRLF as LF
    assert head.split()[1] == "200", out.stdout
    assert "idempotent-replayed: true" in head.lower(), head
    assert first.json()["job_id"] in body
    jobs = stack.scalar("SELECT count(*) FROM jobs WHERE idempotency_key = %s" % q(key))
    other = admin.post(url, json={"command": "echo two", "wait": True}, headers={"Idempotency-Key": key})
    body = assert_error(other, 422)
    assert key in body["detail"], body
    # nothing ran
    assert stack.scalar("SELECT count(*) FROM jobs WHERE idempotency_key = %s" % q(key)) == jobs == "1"
