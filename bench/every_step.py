#!/usr/bin/env python3
"""Cost of per-step checkpoints (issue 21, docs/checkpoints.md).

Starts its own stack (tests/integration/stack.py), makes two sandboxes of
image host, one with checkpoints "every_step" and one without, each with a
workspace of FILES files of SIZE bytes, and times N back-to-back
`POST /exec {"wait": true}` of a command that changes one file, alternating
between the two sandboxes in blocks of 10 so that machine noise hits both
alike. Back-to-back is the worst case: each step of the every_step sandbox
first waits for the previous step's checkpoint (the api's step barrier),
so the copy is on its path. Prints p50/p90 of both and their ratio as JSON.

    python3 bench/every_step.py [N] [FILES] [SIZE]     # defaults 200 50 4096
    BENCH_BTRFS=1 python3 bench/every_step.py ...      # the btrfs backend, on a
                                                       # loop-mounted btrfs (root)
"""
import contextlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import btrfs_loop  # noqa: E402
from stack import Stack, make_tmpdir  # noqa: E402


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 200
    files = int(argv[2]) if len(argv) > 2 else 50
    size = int(argv[3]) if len(argv) > 3 else 4096
    btrfs = os.environ.get("BENCH_BTRFS") == "1"
    var = make_tmpdir()
    st = Stack(var=var, env={"ORCHARD_CHECKPOINT_BACKEND": "btrfs"} if btrfs else {})
    with (btrfs_loop.mounted(os.path.join(var, "sandboxes"), "2G") if btrfs
          else contextlib.nullcontext()):
        try:
            st.up()
            run(st, n, files, size, btrfs)
        finally:
            st.down()
    st.remove()
    return 0


def run(st, n, files, size, btrfs):
    s = st.session()
    sids = {}
    for mode in ("none", "every_step"):
        r = s.post(st.url + "/v1/sandboxes", json={"image": "host", "checkpoints": mode})
        r.raise_for_status()
        sid = r.json()["sandbox_id"]
        st.wait_ready(s, sid)
        sids[mode] = sid
        r = s.post("%s/v1/sandboxes/%s/exec" % (st.url, sid), json={
            "command": "cd /workspace && for i in $(seq %d); do head -c %d /dev/urandom > f$i; done"
                       % (files, size), "wait": True})
        r.raise_for_status()
    times = {"none": [], "every_step": []}
    i = 0
    while i < n:
        for mode in ("none", "every_step"):
            for k in range(10):
                t0 = time.monotonic()
                r = s.post("%s/v1/sandboxes/%s/exec" % (st.url, sids[mode]),
                           json={"command": "echo %d > /workspace/step" % (i + k), "wait": True})
                times[mode].append((time.monotonic() - t0) * 1000)
                assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
        i += 10
    out = {"n": n, "files": files, "file_bytes": size}
    for mode, v in times.items():
        v.sort()
        out[mode] = {"p50_ms": round(statistics.median(v), 2),
                     "p90_ms": round(v[int(len(v) * 0.9) - 1], 2)}
    out["ratio_p50"] = round(out["every_step"]["p50_ms"] / out["none"]["p50_ms"], 2)
    out["ratio_p90"] = round(out["every_step"]["p90_ms"] / out["none"]["p90_ms"], 2)
    out["step_checkpoints"] = st.scalar("SELECT count(*) FROM checkpoints WHERE kind = 'step'")
    out["backend"] = "btrfs" if btrfs else "copy (default)"
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
