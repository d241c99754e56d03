"""Host processes as the tests see them (shared by tests/integration and
tests/reliability, which puts this directory on sys.path)."""


def alive(pid):
    """True if pid exists and is neither a zombie nor dead (/proc state)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False
