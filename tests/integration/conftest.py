"""Fixtures shared by the integration tests.

`stack` is one whole Orchard stack (PostgreSQL, orchard-api,
orchard-controller, nginx) for the test session, started by the production
script in a fresh temporary directory on a free port, and torn down after.
"""
import os
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import spec_check  # noqa: E402
from stack import Stack, log_tails  # noqa: E402

spec_check.install()


def pytest_configure(config):
    config.addinivalue_line("markers", "spec_exempt: the test sends garbage on purpose; its "
                            "answers are not checked against docs/openapi.yaml (spec_check.py)")


@pytest.fixture(autouse=True)
def _answers_match_the_spec(request):
    """Fail a test that received an answer docs/openapi.yaml does not
    document (tests/integration/spec_check.py), unless it is spec_exempt."""
    yield
    problems = spec_check.take_problems()
    here = os.path.dirname(os.path.abspath(__file__))
    if not str(request.node.fspath).startswith(here + os.sep):
        return      # tests/reliability borrows these fixtures; its outages are its own
    if problems and request.node.get_closest_marker("spec_exempt") is None:
        pytest.fail("answers that disagree with docs/openapi.yaml:\n" + "\n".join(problems[:10]),
                    pytrace=False)


@pytest.fixture(scope="session")
def stack():
    s = Stack()
    s.start()
    yield s
    s.close()


@pytest.fixture(scope="session")
def admin(stack):
    """A requests session with the stack's admin key (tenant "default")."""
    return stack.session()


@pytest.fixture(scope="session")
def other(stack):
    """A requests session for a second tenant."""
    return stack.session(key=stack.new_tenant_key("tenant-b"))


@pytest.fixture(scope="session")
def sandbox(stack, admin):
    """One ready `host` sandbox of tenant "default", shared by exec tests.
    It lives for the whole session, across files that never touch it (the
    controller files alone can take longer than the default idle timeout
    under the sanitizers), so it must not expire for idleness."""
    r = admin.post(stack.url + "/sandboxes", json={"image": "host", "idle_timeout_seconds": 7200})
    assert r.status_code in (200, 201), r.text
    sid = r.json()["sandbox_id"]
    info = stack.wait_ready(admin, sid)
    assert info.get("ready") is True or info.get("status") == "ready", info
    yield sid
    admin.delete("%s/sandboxes/%s" % (stack.url, sid))


@pytest.fixture
def local_user():
    """A fresh unprivileged local user (no home, no login shell), removed
    after the test; use with stack.as_user. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("creating a local user needs root")
    name = "orc-u" + uuid.uuid4().hex[:8]
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A failed test that used the stack shows the ends of the stack's logs.
    outcome = yield
    report = outcome.get_result()
    st = getattr(item, "funcargs", {}).get("stack")
    if report.failed and report.when == "call" and st is not None:
        report.sections.append(("orchard logs (%s)" % st.var, log_tails(st.var, lines=15)))
