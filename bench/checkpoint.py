#!/usr/bin/env python3
"""Checkpoint and fork figures for the local driver (issue 20,
docs/checkpoints.md), with same-run baselines:

  - checkpoint p50 with 1 MB changed and with a big tree changed (default
    200 MB in 10,000 files), on the btrfs backend (a loop-mounted btrfs as
    the state dir) and on the copy backend (the machine's /tmp);
  - btrfs: the ratio large/small; copy: the state's MB/s against `cp -a`
    of the same tree on the same filesystem, timed in the same run;
  - fork of 16 from one checkpoint, each fork's create->ready p50 (and all
    16 ready) against one plain create->ready p50, same stack, same run;
  - btrfs: the disk cost of a checkpoint of an unchanged sandbox (bytes
    used by the filesystem, `btrfs filesystem usage -b`, over 10 of them).

    sudo bench/checkpoint.py                 # both backends; writes bench/results/
    bench/checkpoint.py --quick              # small sizes (a smoke run, ~1 min)
    bench/checkpoint.py --backends copy      # one backend
    sudo bench/checkpoint.py --fork-abab 2   # fork of 16 only: ORCHARD_FORK_PARALLEL=0
                                             # against the default, alternating stacks

Needs root (loop mount) for btrfs, btrfs-progs (scripts/deps.sh) and a
built tree (make). Not part of the test suite. Times are client-side:
POST /v1/sandboxes/{id}/checkpoints answers once the checkpoint is ready.
"""
import argparse
import contextlib
import datetime
import os
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import btrfs_loop  # noqa: E402
from stack import Stack, make_tmpdir  # noqa: E402

# Writes `files` files of `size` random bytes under /workspace/<dir>.
WRITE_TREE = ("import os,sys; d,n,s=sys.argv[1],int(sys.argv[2]),int(sys.argv[3]);"
              " os.makedirs(d,exist_ok=True);"
              " [open('%s/%04d/f%06d'%(d,i//500,i),'wb').write(os.urandom(s))"
              " for i in range(n) if os.makedirs('%s/%04d'%(d,i//500),exist_ok=True) or True]")


def p50(xs):
    return statistics.median(xs)


class Bench:
    def __init__(self, stack):
        self.stack = stack
        self.s = stack.session()

    def create(self):
        t0 = time.monotonic()
        r = self.s.post(self.stack.url + "/v1/sandboxes", json={"image": "host"})
        assert r.status_code == 200, r.text
        sid = r.json()["sandbox_id"]
        assert self.stack.wait_ready(self.s, sid, timeout=300)["status"] == "ready"
        return sid, time.monotonic() - t0

    def sh(self, sid, cmd, timeout=900):
        r = self.s.post("%s/v1/sandboxes/%s/exec" % (self.stack.url, sid),
                        json={"command": cmd, "wait": True, "timeout": timeout}, timeout=timeout + 60)
        assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
        return r.json()["stdout"]

    def checkpoint(self, sid):
        t0 = time.monotonic()
        r = self.s.post("%s/v1/sandboxes/%s/checkpoints" % (self.stack.url, sid), json={},
                        timeout=1800)
        dt = time.monotonic() - t0
        assert r.status_code == 200 and r.json()["state"] == "ready", r.text
        return r.json(), dt

    def counted(self, ck):
        """The checkpoint's bytes, once the controller has counted them."""
        url = "%s/v1/checkpoints/%s" % (self.stack.url, ck)
        for _ in range(6000):
            n = self.s.get(url).json()["bytes"]
            if n is not None:
                return n
            time.sleep(0.05)
        raise AssertionError("bytes of %s never counted" % ck)

    def delete_ckpt(self, ck):
        """Delete and wait until the copy or snapshot is gone (and the
        filesystem synced), so no removal overlaps the next measurement."""
        self.s.delete("%s/v1/checkpoints/%s" % (self.stack.url, ck))
        self.stack.wait_for(lambda: self.stack.scalar("SELECT state FROM checkpoints WHERE id = '%s'"
                                                      % ck) == "deleted", timeout=600,
                            what="checkpoint %s deleted" % ck)
        sync_fs(os.path.join(self.stack.var, "sandboxes"))

    def delete(self, sid):
        self.s.delete("%s/v1/sandboxes/%s" % (self.stack.url, sid))

    def fork(self, ck, count):
        """Each fork's POST->ready time (seconds), and all of them ready."""
        t0 = time.monotonic()
        r = self.s.post("%s/v1/checkpoints/%s/fork" % (self.stack.url, ck), json={"count": count})
        assert r.status_code == 200, r.text
        ids = r.json()["sandbox_ids"]
        times = {}

        def wait(sid):
            sess = self.stack.session()
            assert self.stack.wait_ready(sess, sid, timeout=600)["status"] == "ready"
            times[sid] = time.monotonic() - t0
        threads = [threading.Thread(target=wait, args=(sid,)) for sid in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return ids, [times[i] for i in ids], time.monotonic() - t0


def sync_fs(path):
    subprocess.run(["sync", "-f", path], check=False)


def run_backend(backend, args, out):
    var = make_tmpdir("ckb-")
    # debug: the controller logs each snapshot's and byte count's time.
    # Admission (docs/controller.md) holds 2 cpus x 8 = 16 one-cpu
    # sandboxes here: the parent plus 16 forks would leave one fork queued
    # and the bench waiting on it, so overcommit enough for all of them.
    stack = Stack(var=var, env={"ORCHARD_CHECKPOINT_BACKEND": backend, "ORCHARD_LOG_LEVEL": "debug",
                                "ORCHARD_CPU_OVERCOMMIT": str(min(1000, max(8, 4 * (args.forks + 1))))})
    state = os.path.join(var, "sandboxes")
    mount = btrfs_loop.mounted(state, args.btrfs_size) if backend == "btrfs" else contextlib.nullcontext()
    with mount:
        try:
            stack.up()
            b = Bench(stack)
            res = {"backend": backend}
            # plain create -> ready
            creates = []
            for _ in range(args.reps):
                sid, dt = b.create()
                creates.append(dt)
                b.delete(sid)
            res["create_ready_p50_ms"] = p50(creates) * 1000
            # 1 MB changed
            sid, _ = b.create()
            b.sh(sid, "head -c 1048576 /dev/urandom > /workspace/one-mb")
            sync_fs(state)
            small = []
            for _ in range(args.reps):
                ck, dt = b.checkpoint(sid)
                small.append(dt)
                b.delete_ckpt(ck["id"])
            res["small_p50_ms"] = p50(small) * 1000
            # fork 16 from a checkpoint of the small state
            ck, _ = b.checkpoint(sid)
            ids, each, whole = b.fork(ck["id"], args.forks)
            res["fork_each_p50_ms"] = p50(each) * 1000
            res["fork_all_ready_ms"] = whole * 1000
            for x in ids:
                b.delete(x)
            # disk cost of a checkpoint of an unchanged sandbox (btrfs)
            if backend == "btrfs":
                sync_fs(state)
                used0 = btrfs_used(state)
                cks = [b.checkpoint(sid)[0]["id"] for _ in range(10)]
                sync_fs(state)
                res["unchanged_ckpt_disk_bytes"] = (btrfs_used(state) - used0) / 10
                for c in cks:
                    b.delete_ckpt(c)
            b.delete_ckpt(ck["id"])
            # the big tree
            b.sh(sid, "python3 -c \"%s\" /workspace/big %d %d"
                 % (WRITE_TREE, args.files, args.mb * 1048576 // args.files))
            sync_fs(state)
            large, large_ids = [], []
            for _ in range(args.reps):
                ck, dt = b.checkpoint(sid)
                large.append(dt)
                large_ids.append(ck["id"])
                # counted after the answer (docs/checkpoints.md): wait for it
                res["large_bytes"] = b.counted(ck["id"])
                b.delete_ckpt(ck["id"])
            res["large_p50_ms"] = p50(large) * 1000
            res.update(controller_times(var, large_ids))
            res["large_over_small"] = res["large_p50_ms"] / res["small_p50_ms"]
            if backend == "copy":
                res["copy_mb_s"] = res["large_bytes"] / 1048576 / p50(large)
                # the same tree with cp -a, same filesystem, same run
                cps = []
                for i in range(args.reps):
                    dst = os.path.join(state, ".cp-baseline-%d" % i)
                    t0 = time.monotonic()
                    subprocess.run(["cp", "-a", "--", os.path.join(state, sid, "workspace"), dst],
                                   check=True)
                    cps.append(time.monotonic() - t0)
                    subprocess.run(["rm", "-rf", "--", dst], check=True)
                    sync_fs(state)
                res["cp_a_mb_s"] = res["large_bytes"] / 1048576 / p50(cps)
            b.delete(sid)
            out.append(res)
        finally:
            stack.down()
    stack.remove()


def run_fork_abab(backend, args, out):
    """Fork of args.forks against one plain create, alternating stacks of
    ORCHARD_FORK_PARALLEL=0 (A: one by one in the loop, as before) and the
    default (B: helper processes), args.abab rounds of A then B, same
    build, same load."""
    for rnd in range(args.abab):
        for label, par in (("A", "0"), ("B", args.fork_parallel)):
            var = make_tmpdir("ckf-")
            env = {"ORCHARD_CHECKPOINT_BACKEND": backend,
                   "ORCHARD_CPU_OVERCOMMIT": str(min(1000, max(8, 4 * (args.forks + 1))))}
            if par:
                env["ORCHARD_FORK_PARALLEL"] = par
            stack = Stack(var=var, env=env)
            state = os.path.join(var, "sandboxes")
            mount = (btrfs_loop.mounted(state, args.btrfs_size) if backend == "btrfs"
                     else contextlib.nullcontext())
            with mount:
                try:
                    stack.up()
                    b = Bench(stack)
                    creates = []
                    for _ in range(args.reps):
                        sid, dt = b.create()
                        creates.append(dt)
                        b.delete(sid)
                    sid, _ = b.create()
                    b.sh(sid, "head -c 1048576 /dev/urandom > /workspace/one-mb")
                    ck, _ = b.checkpoint(sid)
                    each, whole = [], []
                    for _ in range(args.fork_reps):
                        ids, e, w = b.fork(ck["id"], args.forks)
                        each.append(p50(e))
                        whole.append(w)
                        for x in ids:
                            b.delete(x)
                    b.delete(sid)
                    res = {"backend": backend, "round": rnd + 1, "label": label,
                           "fork_parallel": par or "0",
                           "create_ready_p50_ms": p50(creates) * 1000,
                           "fork_each_p50_ms": p50(each) * 1000,
                           "fork_all_ready_ms": p50(whole) * 1000,
                           "load": os.getloadavg()[0]}
                    res["ratio"] = res["fork_each_p50_ms"] / res["create_ready_p50_ms"]
                    print(res, flush=True)
                    out.append(res)
                finally:
                    stack.down()
            stack.remove()


def write_report(lines, args, name):
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        path = os.path.join(REPO, "bench", "results", name)
        with open(path, "w") as f:
            f.write(text)
        print("written to", path)


def report_abab(results, args, load0, load1):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    lines = ["# Fork ABAB %s" % when, "",
             "`bench/checkpoint.py %s` on %d cores; load average before %.2f %.2f %.2f, after %.2f %.2f %.2f."
             % (" ".join(sys.argv[1:]), os.cpu_count(), *load0, *load1),
             "A: ORCHARD_FORK_PARALLEL=0 (launched one by one in the loop); B: ORCHARD_FORK_PARALLEL=%s "
             "(helper processes). One stack per row; plain create p50 of %d, fork of %d from a 1 MB "
             "checkpoint, %d times (each fork's POST->ready p50, p50 over the times)."
             % (args.fork_parallel, args.reps, args.forks, args.fork_reps), "",
             "| backend | round | build | create->ready p50 | fork each p50 | all %d ready | fork p50 / create p50 | load |"
             % args.forks,
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append("| %s | %d | %s (%s) | %.0f ms | %.0f ms | %.0f ms | %.2fx | %.1f |" % (
            r["backend"], r["round"], r["label"], r["fork_parallel"], r["create_ready_p50_ms"],
            r["fork_each_p50_ms"], r["fork_all_ready_ms"], r["ratio"], r["load"]))
    write_report(lines, args, "fork-abab-%s.md" % when)


def controller_times(var, ids):
    """p50 of the controller's own snapshot and byte-count times (debug
    log) for checkpoints ids."""
    import json
    snap, count = [], []
    with open(os.path.join(var, "log", "controller.log")) as f:
        for line in f:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if j.get("checkpoint_id") in ids:
                if "snapshot_ms" in j:
                    snap.append(int(j["snapshot_ms"]))
                if "count_ms" in j:
                    count.append(int(j["count_ms"]))
    out = {}
    if snap:
        out["large_snapshot_p50_ms"] = p50(snap)
    if count:
        out["large_count_p50_ms"] = p50(count)
    return out


def btrfs_used(path):
    r = subprocess.run(["btrfs", "filesystem", "usage", "-b", path], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.strip().startswith("Used:"):
            return int(line.split()[1])
    raise RuntimeError("btrfs filesystem usage: %s" % r.stderr)


def report(results, args, load0, load1):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    lines = ["# Checkpoint bench %s" % when, "",
             "`bench/checkpoint.py %s` on %d cores; load average before %.2f %.2f %.2f, after %.2f %.2f %.2f."
             % (" ".join(sys.argv[1:]), os.cpu_count(), *load0, *load1),
             "Big tree: %d MB in %d files; %d repetitions per figure (p50); forks: %d." %
             (args.mb, args.files, args.reps, args.forks), "",
             "| backend | create->ready p50 | ckpt 1 MB p50 | ckpt big p50 | of which snapshot / byte count (controller) | big/small | fork each p50 | all %d ready | fork p50 / create p50 | copy MB/s | cp -a MB/s | unchanged ckpt on disk |" % args.forks,
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append("| %s | %.0f ms | %.1f ms | %.1f ms | %s / %s | %.2fx | %.0f ms | %.0f ms | %.2fx | %s | %s | %s |" % (
            r["backend"], r["create_ready_p50_ms"], r["small_p50_ms"], r["large_p50_ms"],
            "%.0f ms" % r["large_snapshot_p50_ms"] if "large_snapshot_p50_ms" in r else "-",
            "%.0f ms" % r["large_count_p50_ms"] if "large_count_p50_ms" in r else "-",
            r["large_over_small"], r["fork_each_p50_ms"], r["fork_all_ready_ms"],
            r["fork_each_p50_ms"] / r["create_ready_p50_ms"],
            "%.0f" % r["copy_mb_s"] if "copy_mb_s" in r else "-",
            "%.0f" % r["cp_a_mb_s"] if "cp_a_mb_s" in r else "-",
            "%.0f KiB" % (r["unchanged_ckpt_disk_bytes"] / 1024) if "unchanged_ckpt_disk_bytes" in r else "-"))
    write_report(lines, args, "checkpoint-%s.md" % when)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="btrfs,copy")
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--forks", type=int, default=16)
    ap.add_argument("--btrfs-size", default="4G")
    ap.add_argument("--quick", action="store_true", help="20 MB in 1,000 files, 3 reps, 4 forks")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--fork-abab", dest="abab", type=int, default=0, metavar="ROUNDS",
                    help="only the fork figure: ROUNDS of a stack with ORCHARD_FORK_PARALLEL=0 "
                         "then one with --fork-parallel")
    ap.add_argument("--fork-parallel", default="8", help="B's ORCHARD_FORK_PARALLEL (--fork-abab)")
    ap.add_argument("--fork-reps", type=int, default=3, help="forks per stack (--fork-abab)")
    args = ap.parse_args()
    if args.quick:
        args.mb, args.files, args.reps, args.forks = 20, 1000, 3, 4
    load0 = os.getloadavg()
    results = []
    for backend in args.backends.split(","):
        if backend == "btrfs" and btrfs_loop.unavailable():
            print("btrfs skipped: %s" % btrfs_loop.unavailable(), file=sys.stderr)
            continue
        if args.abab:
            run_fork_abab(backend, args, results)
        else:
            run_backend(backend, args, results)
    if args.abab:
        report_abab(results, args, load0, os.getloadavg())
    else:
        report(results, args, load0, os.getloadavg())


if __name__ == "__main__":
    main()
