"""HTTP conventions of the API that clients we did not write rely on
(issue 25, "The API"): Idempotency-Key bound to its body, replayed answers
marked; through requests and curl against the real stack.
"""
import os
import subprocess

from test_api import assert_error, exec_wait, q, unique, wait_status


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


def test_idempotency_key_on_exec_runs_the_command_once(stack, admin, sandbox):
    """A retried async exec (same key, same body) is the first job, and the
    sandbox itself shows the command ran once; another body is 422 and runs
    nothing."""
    key = unique("idem")
    runs = "/workspace/%s.runs" % key
    url = "%s/v1/sandboxes/%s/exec" % (stack.url, sandbox)
    body = {"command": "sleep 1; echo ran >> %s" % runs, "wait": False}
    first = admin.post(url, json=body, headers={"Idempotency-Key": key})
    assert first.status_code == 200, first.text
    job = first.json()["job_id"]
    # retried while the first may still run, and again after it finished
    again = admin.post(url, json=body, headers={"Idempotency-Key": key})
    assert again.status_code == 200, again.text
    assert again.json()["job_id"] == job and again.headers["Idempotent-Replayed"] == "true"
    assert wait_status(stack, admin, job, ("succeeded", "failed"), timeout=60)["status"] == "succeeded"
    late = admin.post(url, json=body, headers={"Idempotency-Key": key})
    assert late.status_code == 200 and late.json()["job_id"] == job, late.text
    other = admin.post(url, json={"command": "echo again >> %s" % runs, "wait": False},
                       headers={"Idempotency-Key": key})
    body = assert_error(other, 422)
    assert key in body["detail"] and "different request body" in body["detail"], body
    seen = exec_wait(stack, admin, sandbox, "sleep 1; cat %s; rm -f %s" % (runs, runs))
    assert (seen["exit_code"], seen["stdout"]) == (0, "ran\n"), seen


# ---- GET .../files/raw: Range, ETag, Last-Modified ---------------------------

def put_raw(stack, s, sandbox, path, data):
    r = s.put("%s/v1/sandboxes/%s/files/raw" % (stack.url, sandbox), params={"path": path}, data=data)
    assert r.status_code in (200, 201), r.text


def test_raw_download_honours_range_and_validators(stack, admin, sandbox):
    path = "/workspace/%s.bin" % unique("range")
    data = bytes(range(256)) * 40          # 10240 bytes
    put_raw(stack, admin, sandbox, path, data)
    url = "%s/v1/sandboxes/%s/files/raw" % (stack.url, sandbox)
    full = admin.get(url, params={"path": path})
    assert full.status_code == 200 and full.content == data
    etag, modified = full.headers["ETag"], full.headers["Last-Modified"]
    assert etag.startswith('"') and etag.endswith('"'), etag
    assert modified.endswith(" GMT"), modified
    assert full.headers["Accept-Ranges"] == "bytes"

    for rng, start, end in (("bytes=2-5", 2, 5), ("bytes=10000-", 10000, 10239),
                            ("bytes=-3", 10237, 10239), ("bytes=10230-99999", 10230, 10239)):
        r = admin.get(url, params={"path": path}, headers={"Range": rng})
        assert r.status_code == 206, (rng, r.status_code, r.text[:200])
        assert r.headers["Content-Range"] == "bytes %d-%d/10240" % (start, end), rng
        assert r.content == data[start:end + 1], rng
        assert r.headers["ETag"] == etag

    # past the end: 416 with the size, in our error shape
    r = admin.get(url, params={"path": path}, headers={"Range": "bytes=10240-"})
    assert_error(r, 416)
    assert r.headers["Content-Range"] == "bytes */10240"
    # several ranges, or one that is not bytes: the whole file
    r = admin.get(url, params={"path": path}, headers={"Range": "bytes=0-1,5-6"})
    assert r.status_code == 200 and r.content == data
    # conditional: unchanged -> 304; If-Range with a stale tag -> all of it
    r = admin.get(url, params={"path": path}, headers={"If-None-Match": etag})
    assert r.status_code == 304 and r.content == b""
    assert r.headers["ETag"] == etag
    r = admin.get(url, params={"path": path}, headers={"Range": "bytes=0-0", "If-Range": '"stale"'})
    assert r.status_code == 200 and r.content == data
    # a changed file has another tag
    put_raw(stack, admin, sandbox, path, data + b"x")
    r = admin.get(url, params={"path": path}, headers={"If-None-Match": etag})
    assert r.status_code == 200 and r.headers["ETag"] != etag and r.content == data + b"x"


def test_curl_resumes_a_download(stack, admin, sandbox, tmp_path):
    path = "/workspace/%s.bin" % unique("resume")
    data = os.urandom(300 * 1024)
    put_raw(stack, admin, sandbox, path, data)
    local = tmp_path / "part.bin"
    local.write_bytes(data[:123457])       # an interrupted download
    out = subprocess.run(["curl", "-sS", "-f", "-C", "-", "-o", str(local), "--cacert", stack.cacert,
                          "-H", "X-API-Key: " + stack.admin_key,
                          "%s/v1/sandboxes/%s/files/raw?path=%s" % (stack.url, sandbox, path)],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert local.read_bytes() == data


# ---- tenants: ETag and If-Match; Location on 201 -----------------------------

def test_tenant_patch_with_if_match_cannot_lose_an_update(stack, admin):
    name = unique("tn")
    r = admin.post(stack.url + "/v1/tenants", json={"name": name, "max_sandboxes": 5})
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == "/v1/tenants/" + name
    got = admin.get("%s/v1/tenants/%s" % (stack.url, r.headers["Location"][len("/v1/tenants/"):]))
    assert got.status_code == 200 and got.json()["max_sandboxes"] == 5
    tag = got.headers["ETag"]
    assert tag == r.headers["ETag"] and tag.startswith('"')
    url = "%s/v1/tenants/%s" % (stack.url, name)
    # admin A changes it with the tag it read
    a = admin.patch(url, json={"max_sandboxes": 6}, headers={"If-Match": tag})
    assert a.status_code == 200, a.text
    assert a.headers["ETag"] != tag and a.json()["max_sandboxes"] == 6
    # admin B, with the same (now stale) tag, is refused and changes nothing
    b = admin.patch(url, json={"max_sandboxes": 7}, headers={"If-Match": tag})
    body = assert_error(b, 412, "precondition_failed")
    assert name in body["detail"]
    assert b.headers["ETag"] == a.headers["ETag"]
    assert admin.get(url).json()["max_sandboxes"] == 6
    # with the current tag, or "*", or none at all, it goes through
    c = admin.patch(url, json={"max_sandboxes": 8}, headers={"If-Match": b.headers["ETag"]})
    assert c.status_code == 200 and c.json()["max_sandboxes"] == 8
    assert admin.patch(url, json={"max_sandboxes": 9}, headers={"If-Match": "*"}).status_code == 200
    assert admin.patch(url, json={"max_sandboxes": 10}).status_code == 200
    # a tenant that does not exist is 404 with or without If-Match
    assert_error(admin.patch(url + "-none", json={"max_sandboxes": 1}, headers={"If-Match": "*"}), 404)
    assert_error(admin.get(url + "-none"), 404)


def test_key_create_answers_location(stack, admin):
    r = admin.post(stack.url + "/v1/keys", json={"tenant": "default", "name": unique("k")})
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == "/v1/keys/" + r.json()["key_id"]
    assert admin.delete(stack.url + r.headers["Location"]).status_code == 200
