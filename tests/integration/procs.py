"""Host processes as the tests see them (shared by tests/integration and
tests/reliability, which puts this directory on sys.path)."""
import os


def alive(pid):
    """True if pid exists and is neither a zombie nor dead (/proc state)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def comm(pid):
    """The command name of pid ("" when it is gone)."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def descendants(roots):
    """The pids roots and every process below them (one /proc snapshot)."""
    parent = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/stat" % pid) as f:
                    parent[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, changed = set(roots), True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if pid not in found and ppid in found:
                found.add(pid)
                changed = True
    return found


UID_CLAIMS = "/run/orchard-sandbox-uids"   # the controller's ORCHARD_SANDBOX_UID_DIR default


def sandbox_uids(state_dir):
    """{host uid: sandbox id} of the per-sandbox uids claimed for the
    sandboxes of state_dir (controller/local_uid.c)."""
    out = {}
    try:
        names = os.listdir(UID_CLAIMS)
    except FileNotFoundError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(UID_CLAIMS, name)) as f:
                state, sid = f.read().split("\n")[:2]
        except (OSError, ValueError):
            continue
        if os.path.realpath(state) == os.path.realpath(state_dir):
            out[int(name)] = sid
    return out


def sandbox_uid(state_dir, sid):
    """The one host uid sandbox sid of state_dir claimed."""
    mine = [u for u, s in sandbox_uids(state_dir).items() if s == sid]
    assert len(mine) == 1, (sid, sandbox_uids(state_dir))
    return mine[0]
