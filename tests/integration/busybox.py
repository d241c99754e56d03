"""A static busybox, for the tests that build a root filesystem holding
nothing else (no libc, no bash, no git): the bundled agent's
(test_agent_pty.py) and imported images' (test_images.py)."""
import os
import shutil


def static_busybox():
    """The path of a statically linked busybox, or None (Debian:
    busybox-static, which scripts/deps.sh installs)."""
    p = shutil.which("busybox") or "/bin/busybox"
    if not os.path.exists(p):
        return None
    with open(p, "rb") as f:
        elf = f.read(1 << 16)
    # a static executable has no PT_INTERP (no loader path in it)
    return None if b"ld-linux" in elf else p
