"""docker-compose.yml, docker/Dockerfile and the scripts the images run.

No container engine runs here, so the images are not built; what can be
checked without one is: the compose file's structure and references, the
Dockerfile's stages and COPY sources, the agent bundle really running in an
empty root (bubblewrap), and the nginx entry point rendering the real
template into a config `nginx -t` accepts.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest
import requests
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from stack import free_port  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCKERFILE = os.path.join(REPO, "docker", "Dockerfile")


def dockerfile_instructions(path):
    """(instruction, args) pairs with continuations joined, comments dropped."""
    out, cur = [], ""
    with open(path) as f:
        for line in f:
            s = line.rstrip("\n")
            if not cur and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            instr, _, args = cur.strip().partition(" ")
            out.append((instr.upper(), args.strip()))
            cur = ""
    return out


def stages(path):
    names = []
    for instr, args in dockerfile_instructions(path):
        if instr == "FROM":
            m = re.match(r"^(\S+)(?:\s+AS\s+(\S+))?$", args, re.I)
            assert m, args
            names.append(m.group(2))
    return names


DIGEST_REF = re.compile(r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$")


def all_dockerfiles():
    found = []
    for d in (REPO, os.path.join(REPO, "docker")):
        found += [os.path.join(d, f) for f in sorted(os.listdir(d))
                  if f == "Dockerfile" or f.startswith("Dockerfile.") or f.endswith(".Dockerfile")]
    return found


def from_images(path):
    """The image every FROM of path builds on, with ARG defaults expanded;
    None for a FROM that names an earlier stage."""
    args, stage_names, out = {}, set(), []
    for instr, rest in dockerfile_instructions(path):
        if instr == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            args.setdefault(k.strip(), v.strip().strip('"'))
        elif instr == "FROM":
            words = [w for w in rest.split() if not w.startswith("--platform")]
            ref = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)),
                         words[0])
            out.append(None if ref in stage_names else ref)
            if len(words) == 3 and words[1].upper() == "AS":
                stage_names.add(words[2])
    return out


def test_every_from_is_pinned_by_digest():
    files = all_dockerfiles()
    assert DOCKERFILE in files
    for path in files:
        with open(path) as f:
            first = f.readline()
        assert not first.lower().startswith("# syntax="), \
            "%s: a syntax directive pulls a frontend image by tag" % path
        bases = [b for b in from_images(path) if b is not None]
        assert bases, path
        for ref in bases:
            assert DIGEST_REF.match(ref), "%s: FROM %s is not pinned by digest" % (path, ref)


def test_every_dockerfile_builds_on_the_same_base():
    """One pin to move (docs/deploy.md): the tools image's file has its own
    ARG BASE_IMAGE line, which must name what docker/Dockerfile's does."""
    files = all_dockerfiles()
    assert os.path.join(REPO, "docker", "Dockerfile.tools") in files
    bases = {path: {b for b in from_images(path) if b is not None} for path in files}
    assert len(set().union(*bases.values())) == 1, bases


def test_pin_check_rejects_a_tag_and_accepts_stages(tmp_path):
    p = tmp_path / "Dockerfile"
    p.write_text("ARG B=debian:bookworm-slim\nFROM ${B} AS one\nFROM one AS two\n"
                 "FROM busybox@sha256:" + "a" * 64 + "\n")
    assert from_images(str(p)) == ["debian:bookworm-slim", None, "busybox@sha256:" + "a" * 64]
    assert not DIGEST_REF.match("debian:bookworm-slim")
    assert not DIGEST_REF.match("debian@sha256:abc")


def test_dockerfile_bundles_the_agent_with_the_one_script():
    runs = " ".join(a for i, a in dockerfile_instructions(DOCKERFILE) if i == "RUN")
    assert "scripts/agent-bundle.sh --patchelf --prefix /orchard /out/orchard" in runs
    assert not os.path.exists(os.path.join(REPO, "docker", "bundle-agent.sh"))


def test_dockerfile_stages_and_copy_sources_exist():
    seen = []
    targets = set(stages(DOCKERFILE))
    assert {"build", "api", "nginx", "controller", "agent", "postgres"} <= targets
    for instr, args in dockerfile_instructions(DOCKERFILE):
        if instr == "FROM":
            base = args.split()[0]
            assert base == "${BASE_IMAGE}" or base in seen, "FROM %s" % base
            seen.append(args.split()[-1])
        if instr == "COPY":
            words = shlex.split(args)
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            src = paths[:-1]
            assert src and paths[-1], args
            frm = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
            if frm:
                assert frm[0] in seen, "COPY --from=%s before that stage" % frm[0]
                continue
            for s in src:
                assert os.path.exists(os.path.join(REPO, s)), "COPY source %s missing" % s


def test_dockerfile_runtime_images_are_not_root():
    current, users = None, {}
    for instr, args in dockerfile_instructions(DOCKERFILE):
        if instr == "FROM":
            current = args.split()[-1]
        if instr == "USER":
            users[current] = args
    for target in ("api", "nginx", "controller", "agent", "postgres"):
        assert target in users and not users[target].startswith("0"), target


def test_compose_file_structure_and_references():
    with open(os.path.join(REPO, "docker-compose.yml")) as f:
        compose = yaml.safe_load(f)
    services = compose["services"]
    assert {"postgres", "migrate", "api", "nginx", "controller"} <= set(services)
    volumes = set(compose.get("volumes") or {})
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, name
        build = svc.get("build")
        if build:
            ctx = os.path.normpath(os.path.join(REPO, build["context"]))
            # normpath: the tools context (bin/sandbox-tools) is built, not checked in
            dockerfile = os.path.normpath(os.path.join(ctx, build["dockerfile"]))
            assert os.path.isfile(dockerfile), name
            if "target" in build or len(stages(dockerfile)) > 1:
                assert build["target"] in stages(dockerfile), name
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, (name, dep)
            assert cond["condition"] in ("service_started", "service_healthy",
                                         "service_completed_successfully")
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], (name, dep)
        for v in svc.get("volumes") or []:
            src = v.split(":")[0]
            if not src.startswith((".", "/")):
                assert src in volumes, (name, src)
        for p in svc.get("ports") or []:
            assert p.startswith("127.0.0.1:"), "%s publishes %s beyond loopback" % (name, p)
        env = svc.get("environment") or {}
        assert all(isinstance(v, str) for v in env.values()), name
    ctl = services["controller"]
    assert "SYS_ADMIN" in ctl["cap_add"] and "seccomp=unconfined" in ctl["security_opt"]
    shared = {"api": "api-run", "nginx": "api-run"}
    for svc, vol in shared.items():
        assert any(v.startswith(vol + ":/run/orchard") for v in services[svc]["volumes"])
    for svc in ("api", "nginx", "controller"):
        assert any(v.startswith("sandboxes:/var/lib/orchard/sandboxes")
                   for v in services[svc]["volumes"]), svc
    # Issue 28: the tools service's image fills the sandbox-tools volume
    # (copy-up over its /opt/sandbox-tools); the controller binds it
    # read-only into its sandboxes, after the fill.
    tools = services["tools"]
    assert tools["build"]["dockerfile"].endswith("docker/Dockerfile.tools")
    assert "sandbox-tools:/opt/sandbox-tools" in tools["volumes"]
    assert "sandbox-tools:/opt/sandbox-tools:ro" in ctl["volumes"]
    assert ctl["depends_on"]["tools"]["condition"] == "service_completed_successfully"
    assert ctl["environment"]["ORCHARD_SANDBOX_TOOLS"].endswith("/opt/sandbox-tools}")


def test_compose_needs_no_registry_and_no_healthcheck_ordering():
    # podman-compose 1.0.3 ignores depends_on conditions: migrate must wait
    # for PostgreSQL itself; PostgreSQL is built here, not pulled.
    with open(os.path.join(REPO, "docker-compose.yml")) as f:
        services = yaml.safe_load(f)["services"]
    assert services["postgres"]["build"]["target"] == "postgres"
    entry = services["migrate"]["entrypoint"]
    assert entry[1:3] == ["migrate", "--wait"] and 0 < int(entry[3]) <= 3600, entry
    for name in ("api", "controller", "nginx", "postgres"):
        assert services[name]["restart"] == "unless-stopped", name
    script = os.path.join(REPO, "docker", "postgres-entrypoint.sh")
    assert os.access(script, os.X_OK)
    subprocess.run(["sh", "-n", script], check=True)
    with open(os.path.join(REPO, ".dockerignore")) as f:
        ignored = f.read().split()
    assert {"bin", "bin-san", "build", "build-san", ".git"} <= set(ignored)


# ---- the agent bundle -------------------------------------------------------

AGENT = os.path.join(REPO, "bin", "orchard-agent")


def _bwrap_works():
    if not shutil.which("bwrap"):
        return False
    return subprocess.run(["bwrap", "--ro-bind", "/", "/", "true"],
                          capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    if not os.access(AGENT, os.X_OK):
        pytest.skip("bin/orchard-agent is not built")
    if not shutil.which("patchelf"):
        pytest.skip("patchelf (Debian package) is not installed")
    out = tmp_path_factory.mktemp("bundle") / "orchard"
    # What docker/Dockerfile's build stage runs for the agent image.
    r = subprocess.run([os.path.join(REPO, "scripts", "agent-bundle.sh"), "--patchelf",
                        "--prefix", "/orchard", str(out)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, ORCHARD_AGENT_BIN=AGENT))
    assert r.returncode == 0, r.stderr
    assert "patchelf=1" in r.stdout
    # The pod's command (controller/k8s_pod.c, docs/kubernetes.md).
    assert (out / "command").read_text().split() == ["/orchard/bin/orchard-agent"]
    return out


def _empty_root_argv(tmp_path, bundle, *extra):
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    return ["bwrap", "--bind", str(empty), "/", "--ro-bind", str(bundle), "/orchard",
            "--proc", "/proc", "--dev", "/dev", "--die-with-parent", *extra]


@pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap cannot make namespaces here")
def test_bundled_agent_runs_in_an_empty_root(tmp_path, bundle):
    libs = sorted(os.listdir(bundle / "lib"))
    assert any(lib.startswith("ld-linux") for lib in libs) and "libc.so.6" in libs
    r = subprocess.run(_empty_root_argv(tmp_path, bundle) +
                       ["/orchard/bin/orchard-agent", "--version"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "orchard-agent" in r.stdout + r.stderr


@pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap cannot make namespaces here")
def test_bundled_agent_serves_health_from_an_empty_root(tmp_path, bundle):
    tokdir = tmp_path / "tok"
    tokdir.mkdir()
    (tokdir / "token").write_text("bundle-token\n")
    # A free port, not a fixed one: a fixed port can be another test stack's
    # (nginx's TLS port answered this test 400 once, in CI).
    port = free_port()
    argv = _empty_root_argv(tmp_path, bundle, "--ro-bind", str(tokdir), "/run/orchard") + [
        "/orchard/bin/orchard-agent", "--listen", f"tcp:127.0.0.1:{port}",
        "--token-file", "/run/orchard/token"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/health"
        deadline = time.monotonic() + 15
        while True:
            try:
                r = requests.get(url, headers={"Authorization": "Bearer bundle-token"},
                                 timeout=2)
                break
            except requests.ConnectionError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "agent did not listen"
                time.sleep(0.05)
        assert proc.poll() is None, "the agent exited; another process answered"
        assert r.status_code == 200 and r.json()["status"] == "ok"
        assert requests.get(url, timeout=2).status_code == 401
    finally:
        proc.terminate()
        proc.wait(10)


# ---- the nginx entry point ----------------------------------------------------

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_nginx_entrypoint_renders_a_config_nginx_accepts(tmp_path):
    env = dict(os.environ, NGINX=NGINX, ORCHARD_TLS_SELF_SIGNED="1",
               ORCHARD_NGINX_PREFIX=str(tmp_path / "ngx"),
               ORCHARD_NGINX_TEMPLATES=os.path.join(REPO, "nginx"),
               ORCHARD_TLS_CERT=str(tmp_path / "tls" / "tls.crt"),
               ORCHARD_TLS_KEY=str(tmp_path / "tls" / "tls.key"),
               ORCHARD_API_SOCKET=str(tmp_path / "api.sock"))
    r = subprocess.run([os.path.join(REPO, "docker", "nginx-entrypoint.sh"), "--check"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    conf = (tmp_path / "ngx" / "orchard.conf").read_text()
    assert "listen 0.0.0.0:8443 ssl;" in conf
    assert "unix:%s;" % (tmp_path / "api.sock") in conf
    # every location the template sends to the auth socket passes to the
    # api's auth socket (default: <socket>.auth)
    with open(os.path.join(REPO, "nginx", "orchard.conf.in")) as f:
        auth_locations = f.read().count("fastcgi_pass unix:@API_AUTH_SOCKET@;")
    assert auth_locations >= 2
    assert conf.count("fastcgi_pass unix:%s.auth;" % (tmp_path / "api.sock")) == auth_locations
    assert not re.search(r"@[A-Z_]+@", conf)
    assert os.readlink(tmp_path / "ngx" / "log" / "nginx-error.log") == "/dev/stderr"


def test_nginx_entrypoint_refuses_unsafe_values(tmp_path):
    env = dict(os.environ, ORCHARD_NGINX_PREFIX=str(tmp_path),
               ORCHARD_API_SOCKET="/run/x;evil")
    r = subprocess.run([os.path.join(REPO, "docker", "nginx-entrypoint.sh"), "--check"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "unsafe value" in r.stderr
