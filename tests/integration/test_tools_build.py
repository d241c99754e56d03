"""scripts/tools-build.sh (docs/sandbox-tools.md): pins, integrity, the
MANIFEST, launchers, extra tools, and refusing a tool that does not run.

These build from small packages that a stand-in `npm` (ORCHARD_TOOLS_NPM)
packs on the spot, so they need no network; test_tools.py uses the real
bundle."""
import base64
import hashlib
import io
import os
import subprocess
import tarfile

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(REPO, "scripts", "tools-build.sh")

FAKE_NPM = """#!/bin/sh
# stand-in for `npm pack --silent --pack-destination DIR ... SPEC`
dest= spec=
while [ $# -gt 0 ]; do
	case $1 in
	--pack-destination) dest=$2; shift 2 ;;
	-*) shift ;;
	*) spec=$1; shift ;;
	esac
done
echo "$spec" >>"$FAKE_NPM_LOG"
name=$(printf '%s' "$spec" | tr '@/' '__')
cp "$FAKE_NPM_DIR/$name.tgz" "$dest/$name.tgz"
"""


def package(files):
    """A gzipped npm-style tarball (package/...) of {path: (mode, bytes)}."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for path, (mode, data) in sorted(files.items()):
            info = tarfile.TarInfo("package/" + path)
            info.size, info.mode = len(data), mode
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def integrity(data):
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


class Env:
    def __init__(self, tmp):
        self.tmp = tmp
        self.pkgs = tmp / "pkgs"
        self.pkgs.mkdir()
        npm = tmp / "npm"
        npm.write_text(FAKE_NPM)
        npm.chmod(0o755)
        self.log = tmp / "npm.log"
        self.log.write_text("")
        self.env = dict(os.environ, ORCHARD_TOOLS_NPM=str(npm), FAKE_NPM_DIR=str(self.pkgs),
                        FAKE_NPM_LOG=str(self.log), ORCHARD_TOOLS_CACHE=str(tmp / "cache"),
                        ORCHARD_TOOLS_VERSIONS=str(tmp / "versions"))
        self.env.pop("ORCHARD_TOOLS_EXTRA", None)
        self.lines = []

    def add(self, name, spec, files, payload, exe, kind="static", pin=None):
        data = package(files)
        (self.pkgs / (spec.replace("@", "_").replace("/", "_") + ".tgz")).write_bytes(data)
        self.lines.append("%s %s %s %s %s %s" % (name, kind, spec, pin or integrity(data), payload, exe))

    def build(self, out, **extra):
        (self.tmp / "versions").write_text("# test pins\n" + "\n".join(self.lines) + "\n")
        env = dict(self.env, **extra)
        return subprocess.run([BUILD, str(out)], env=env, capture_output=True, text=True, timeout=300)


def script(text):
    return (0o755, ("#!/bin/sh\n" + text + "\n").encode())


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    e.add("alpha", "@acme/alpha-linux-x64@1.2.3",
          {"vendor/bin/alpha": script('echo "alpha 1.2.3 $*"; [ -f "${0%/*}/../side" ]'),
           "vendor/side": (0o644, b"sidecar\n"), "README.md": (0o644, b"x\n")},
          "vendor", "bin/alpha")
    e.add("beta", "beta-linux-x64@0.9.0", {"bin/beta": script('echo "beta 0.9.0"')}, "bin/beta", "beta")
    return e


def manifest(out):
    return (out / "MANIFEST").read_text()


def test_build_lays_out_pinned_payloads_with_launchers_and_manifest(env, tmp_path):
    out = tmp_path / "bundle"
    r = env.build(out)
    assert r.returncode == 0, r.stderr
    # the directory payload is kept whole: the tool finds its sidecar
    assert (out / "libexec/alpha/side").read_text() == "sidecar\n"
    assert (out / "libexec/beta/beta").is_file()
    assert not (out / "libexec/alpha/README.md").exists()
    # launchers are POSIX sh and relocatable: run them from a copy elsewhere
    moved = tmp_path / "moved"
    subprocess.run(["cp", "-a", str(out), str(moved)], check=True)
    for name in ("alpha", "beta"):
        launcher = (moved / "bin" / name)
        assert launcher.read_text().startswith("#!/bin/sh\n")
    got = subprocess.run(["sh", "-c", "PATH=/usr/bin:/bin:%s/bin alpha --x" % moved],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and got.stdout == "alpha 1.2.3 --x\n", got
    m = manifest(out)
    assert "@acme/alpha-linux-x64@1.2.3" in m and "beta-linux-x64@0.9.0" in m
    assert " 755 bin/alpha\n" in m and " 644 libexec/alpha/side\n" in m
    assert "bin/beta" in m and "etc/profile.d/sandbox-tools.sh" in m


def test_rebuild_is_skipped_and_a_fresh_build_gives_the_same_manifest(env, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert env.build(a).returncode == 0
    r = env.build(a)
    assert r.returncode == 0 and "up to date" in r.stdout
    # second build from the cache: no download, same MANIFEST byte for byte
    fetches = env.log.read_text().count("\n")
    assert env.build(b).returncode == 0
    assert env.log.read_text().count("\n") == fetches
    assert manifest(a) == manifest(b)


def test_a_download_that_differs_from_its_pin_is_refused(env, tmp_path):
    env.lines[1] = env.lines[1].replace(env.lines[1].split()[3], integrity(b"something else"))
    out = tmp_path / "bundle"
    r = env.build(out)
    assert r.returncode != 0
    assert "beta-linux-x64@0.9.0" in r.stderr and "refusing" in r.stderr
    assert not out.exists()


def test_a_tool_that_does_not_run_is_refused_and_the_old_bundle_kept(env, tmp_path):
    out = tmp_path / "bundle"
    assert env.build(out).returncode == 0
    before = manifest(out)
    extra = tmp_path / "extra"
    (extra / "bin").mkdir(parents=True)
    (extra / "bin" / "broken").write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 3\n")
    (extra / "bin" / "broken").chmod(0o755)
    r = env.build(out, ORCHARD_TOOLS_EXTRA=str(extra))
    assert r.returncode != 0
    assert '"bin/broken --version" failed (exit 3)' in r.stderr, r.stderr
    assert manifest(out) == before
    assert not (out / "bin" / "broken").exists()


def test_extra_tools_join_the_bundle_on_path(env, tmp_path):
    extra = tmp_path / "extra"
    (extra / "bin").mkdir(parents=True)
    (extra / "libexec" / "pi").mkdir(parents=True)
    (extra / "libexec" / "pi" / "pi").write_text("#!/bin/sh\necho pi 0.1\n")
    (extra / "libexec" / "pi" / "pi").chmod(0o755)
    (extra / "bin" / "pi").write_text('#!/bin/sh\nexec "${0%/*}/../libexec/pi/pi" "$@"\n')
    (extra / "bin" / "pi").chmod(0o755)
    out = tmp_path / "bundle"
    r = env.build(out, ORCHARD_TOOLS_EXTRA=str(extra))
    assert r.returncode == 0, r.stderr
    assert "bin/pi: pi 0.1" in r.stdout
    assert " bin/pi\n" in manifest(out)
    # an extra tool may not replace a pinned one
    (extra / "bin" / "beta").write_text("#!/bin/sh\necho fake\n")
    (extra / "bin" / "beta").chmod(0o755)
    r = env.build(tmp_path / "other", ORCHARD_TOOLS_EXTRA=str(extra))
    assert r.returncode != 0 and '"bin/beta" is already in the bundle' in r.stderr


def test_bad_pins_are_refused_with_the_line(env, tmp_path):
    env.lines.append("gamma static gamma@latest sha512-x payload exe")
    r = env.build(tmp_path / "bundle")
    assert r.returncode != 0 and "versions:" in r.stderr and "gamma@latest" in r.stderr


def test_the_pins_file_pins_the_three_harnesses():
    text = open(os.path.join(REPO, "sandbox-tools", "versions")).read()
    rows = [ln.split() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    got = {r[0]: r for r in rows}
    assert set(got) == {"codex", "claude", "opencode"}
    assert got["codex"][1] == "static" and "-linux-musl" in got["codex"][4]
    assert got["claude"][2].startswith("@anthropic-ai/claude-code-linux-x64@")
    assert got["opencode"][2].startswith("opencode-linux-x64@")
    for r in rows:
        assert r[3].startswith("sha512-")
