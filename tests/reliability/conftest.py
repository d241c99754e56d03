"""Fixtures of the reliability suite (issue 9).

The shared fixtures (`stack`, `admin`, `other`, `sandbox`) are tests/integration/conftest.py's,
loaded from there under a name of their own and re-exported, so this suite
has one session stack of its own without a copy of the code.

`private_stack` is a whole stack for one test: the fault tests kill its
processes, which must not disturb anything else.
"""
import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATION = os.path.join(os.path.dirname(HERE), "integration")
sys.path.insert(0, INTEGRATION)
sys.path.insert(0, HERE)

_spec = importlib.util.spec_from_file_location("orchard_integration_conftest",
                                               os.path.join(INTEGRATION, "conftest.py"))
_ic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ic)

stack = _ic.stack
admin = _ic.admin
other = _ic.other
sandbox = _ic.sandbox

from stack import Stack, log_tails, make_tmpdir  # noqa: E402


@pytest.fixture()
def private_stack():
    s = Stack(make_tmpdir("orc-rel-"))
    s.start()
    yield s
    s.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A failed test shows the ends of its stack's logs (either fixture).
    outcome = yield
    report = outcome.get_result()
    args = getattr(item, "funcargs", {})
    st = args.get("private_stack") or args.get("stack")
    if report.failed and report.when == "call" and st is not None:
        report.sections.append(("orchard logs (%s)" % st.var, log_tails(st.var, lines=15)))
