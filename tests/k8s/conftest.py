"""Fixtures for the fake Kubernetes API server's own tests and for driver
tests that run against it."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_apiserver import FakeApiServer  # noqa: E402

NS = "orchard-sandboxes"


@pytest.fixture
def fake_k8s():
    """A started FakeApiServer on a free 127.0.0.1 port, token "test-token",
    fast lifecycle (pods Ready after 0.1 s, deletes after 0.1 s)."""
    fake = FakeApiServer(token="test-token", namespaces=(NS,), ready_delay=0.1,
                         delete_delay=0.1, bookmark_interval=0.3)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
