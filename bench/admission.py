#!/usr/bin/env python3
"""Admission under load (issue 22, "Benchmarks"; docs/controller.md "Admission").

Starts its own stack (tests/integration/stack.py) whose controller admits
into CAPACITY cpus (no overcommit, no reserve) and makes two tenants, a
(weight 1) and b (weight 2). Each submits N/2 sandboxes of 1 cpu at once,
as batches (POST /v1/sandboxes/batch, at most 1000 each), from its own
thread. A reaper deletes every sandbox as soon as it is ready, so the
queue moves; a sampler reads, every 0.25 s, the cpu admitted to live
sandboxes (which must never pass CAPACITY) and the queue depth.

Reports, as JSON (stdout and bench/results/admission-<UTC>.json with
--save): the largest admitted cpu sampled against the capacity, the
fair-share ratio (b's admitted count over a's while both still had a
backlog, against the weight ratio 2; within 20 % is the issue's goal),
wait-time percentiles (created_at -> ready_at) per tenant, and that every
sandbox became ready once, was deleted, and the queue drained. Exits 1 when
a correctness property fails (oversubscription, a lost or twice-admitted
sandbox, a queue that did not drain); times are reported, never asserted.

    python3 bench/admission.py                # issue 22's size: N=2000, CAPACITY=64
    python3 bench/admission.py --quick        # N=120, CAPACITY=8 (a few minutes at most)
    python3 bench/admission.py N CAPACITY [--save]
"""
import datetime
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
from stack import Stack  # noqa: E402

WEIGHTS = {"bench-a": 1, "bench-b": 2}
SPEC = {"image": "host", "cpu": "1", "memory": "64Mi", "timeout": 3600, "labels": {"bench": "admission"}}
DEADLINE_S = 3600


def iso_epoch(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def pct(v, p):
    v = sorted(v)
    return round(v[min(len(v) - 1, int(len(v) * p))], 3) if v else None


def submit(st, s, n, out, errors):
    """POST /v1/sandboxes/batch until n are created; the ids into out."""
    while n > 0:
        k = min(n, 1000)
        r = s.post(st.url + "/v1/sandboxes/batch", json=dict(SPEC, count=k), timeout=300)
        if r.status_code != 201:
            errors.append("batch create: %d %s" % (r.status_code, r.text[:200]))
            return
        out.extend(r.json()["sandbox_ids"])
        n -= k


def reap(st, sessions, total, done, stop):
    """Delete every ready sandbox, recording its wait; until total are done."""
    while len(done) < total and not stop.is_set():
        got = 0
        for tenant, s in sessions.items():
            r = s.get(st.url + "/v1/sandboxes", params={"status": "ready", "label": "bench=admission",
                                                        "limit": 1000}, timeout=60)
            for sb in r.json()["sandboxes"] if r.status_code == 200 else []:
                if sb["sandbox_id"] in done:
                    continue
                done[sb["sandbox_id"]] = (tenant, iso_epoch(sb["ready_at"]) - sb["created_at"])
                s.delete("%s/v1/sandboxes/%s" % (st.url, sb["sandbox_id"]), timeout=60)
                got += 1
        if not got:
            time.sleep(0.2)


def sample(st, samples, stop):
    while not stop.is_set():
        row = st.psql("SELECT coalesce(sum(cpu_millis) FILTER (WHERE admitted_at IS NOT NULL"
                      " AND state IN ('pending', 'ready', 'deleting')), 0),"
                      " count(*) FILTER (WHERE state = 'pending' AND admitted_at IS NULL)"
                      " FROM sandboxes")[0]
        samples.append((time.monotonic(), int(row[0]), int(row[1])))
        time.sleep(0.25)


def fairness(st):
    """b's admitted count over a's among the rows admitted while both still
    had rows waiting (up to the first tenant's last admission)."""
    rows = st.psql("SELECT t.name, extract(epoch FROM s.admitted_at) FROM sandboxes s"
                   " JOIN tenants t ON t.id = s.tenant_id WHERE s.admitted_at IS NOT NULL"
                   " AND s.labels @> '{\"bench\": \"admission\"}' ORDER BY s.admitted_at")
    last = {}
    for name, at in rows:
        last[name] = float(at)
    if len(last) < 2:
        return None, {}
    cut = min(last.values())
    counts = {name: 0 for name in WEIGHTS}
    for name, at in rows:
        if float(at) < cut:
            counts[name] += 1
    ratio = counts["bench-b"] / counts["bench-a"] if counts["bench-a"] else None
    return ratio, counts


def run(st, n, capacity):
    admin = st.session()
    sessions = {}
    for name, w in WEIGHTS.items():
        assert admin.post(st.url + "/v1/tenants", json={"name": name}).status_code == 201
        st.psql("UPDATE tenants SET weight = %d WHERE name = '%s'" % (w, name))
        sessions[name] = st.session(key=st.new_tenant_key(name))
    ids = {name: [] for name in WEIGHTS}
    errors, done, samples = [], {}, []
    stop = threading.Event()
    t0 = time.monotonic()
    threads = [threading.Thread(target=submit, args=(st, sessions[name], n // 2, ids[name], errors))
               for name in WEIGHTS]
    threads.append(threading.Thread(target=sample, args=(st, samples, stop), daemon=True))
    reaper = threading.Thread(target=reap, args=(st, sessions, n // 2 * 2, done, stop), daemon=True)
    for t in threads + [reaper]:
        t.start()
    for t in threads[:2]:
        t.join()
    reaper.join(DEADLINE_S)
    elapsed = time.monotonic() - t0
    # every sandbox deleted and the queue drained
    drained = False
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if st.scalar("SELECT count(*) FROM sandboxes WHERE state IN ('pending', 'ready', 'deleting')") == "0":
            drained = True
            break
        time.sleep(0.5)
    stop.set()
    created = sum(len(v) for v in ids.values())
    ready_events = st.psql("SELECT sandbox_id, count(*) FROM events WHERE kind = 'sandbox.ready'"
                           " GROUP BY 1 HAVING count(*) > 1")
    failed = st.scalar("SELECT count(*) FROM sandboxes WHERE state = 'failed'")
    ratio, counts = fairness(st)
    max_admitted = max((x[1] for x in samples), default=0)
    out = {
        "n": n, "capacity_cpu": capacity, "sandbox_cpu": 1, "weights": WEIGHTS,
        "elapsed_s": round(elapsed, 1), "created": created, "ready_and_deleted": len(done),
        "failed": int(failed), "admitted_twice": len(ready_events), "queue_drained": drained,
        "samples": len(samples), "max_admitted_cpu_millis": max_admitted,
        "max_queue_depth": max((x[2] for x in samples), default=0),
        "oversubscribed": max_admitted > capacity * 1000,
        "fair_share": {"admitted_while_both_waited": counts,
                       "ratio_b_over_a": round(ratio, 3) if ratio else None, "weight_ratio": 2.0,
                       "within_20_percent": bool(ratio and abs(ratio - 2.0) <= 0.4)},
        "wait_s": {},
        "errors": errors[:10],
    }
    for name in WEIGHTS:
        waits = [w for tenant, w in done.values() if tenant == name]
        out["wait_s"][name] = {"n": len(waits), "p50": pct(waits, 0.5), "p90": pct(waits, 0.9),
                               "p99": pct(waits, 0.99), "max": pct(waits, 1.0)}
    ok = (not errors and created == n // 2 * 2 and len(done) == created and not ready_events
          and drained and not out["oversubscribed"] and out["failed"] == 0)
    out["correct"] = ok
    return out


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    quick = "--quick" in argv
    n = int(args[0]) if args else (120 if quick else 2000)
    capacity = int(args[1]) if len(args) > 1 else (8 if quick else 64)
    st = Stack(env={"ORCHARD_CAPACITY_CPU": str(capacity), "ORCHARD_CPU_OVERCOMMIT": "1",
                    "ORCHARD_CAPACITY_CPU_RESERVE": "0", "ORCHARD_CAPACITY_MEMORY": "%dMi" % (128 * capacity),
                    "ORCHARD_CAPACITY_MEMORY_RESERVE": "0", "ORCHARD_API_RATE_LIMIT": "0"})
    try:
        st.up()
        st.wait_for(lambda: st.scalar("SELECT cpu_millis FROM driver_capacity") == str(capacity * 1000),
                    timeout=120, what="the controller's capacity report")
        out = run(st, n, capacity)
    finally:
        st.down()
    st.remove()
    text = json.dumps(out, indent=2)
    print(text)
    if "--save" in argv:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                            "admission-%s.json" % stamp)
        with open(path, "w") as f:
            f.write(text + "\n")
    return 0 if out["correct"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
