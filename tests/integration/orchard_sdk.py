"""Orchard's published Python SDK (orchard_env), the client our API must
serve unchanged (issue 18).

The SDK is not part of this repository and is never copied into it: it
lives, unmodified, in ../shared/reference/orchard-sdk beside the checkout
(ORCHARD_SDK_DIR overrides the place). load() imports it from there; a
test module that needs it calls load() at import time and is skipped, with
the reason, on a machine without it.

sdk_env(stack) points the SDK at a stack the way a user would: the
SANDBOX_BASE_URL and SANDBOX_API_KEY it reads, and the stack's CA for
requests (REQUESTS_CA_BUNDLE), aiohttp (SSL_CERT_FILE) and websocket-client
(WEBSOCKET_CLIENT_CA_BUNDLE). aiohttp builds its default SSL context once
per process and caches it, so sdk_env clears that cache: every client made
inside sdk_env trusts this stack's CA, whatever stack an earlier test used.
Make the clients inside the `with` (one per test).
"""
import contextlib
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLACES = (os.path.join(os.path.dirname(REPO), "shared", "reference", "orchard-sdk"),
          "/work/shared/reference/orchard-sdk")


def sdk_dir():
    """Where the SDK is, or None."""
    places = (os.environ["ORCHARD_SDK_DIR"],) if os.environ.get("ORCHARD_SDK_DIR") else PLACES
    for place in places:
        if os.path.isfile(os.path.join(place, "orchard_env", "__init__.py")):
            return place
    return None


def load():
    """Import orchard_env from the reference copy; skip the module without it."""
    place = sdk_dir()
    if not place or not os.path.isfile(os.path.join(place, "orchard_env", "__init__.py")):
        pytest.skip("Orchard's SDK is not here (looked in ORCHARD_SDK_DIR and %s)" % ", ".join(PLACES),
                    allow_module_level=True)
    if place not in sys.path:
        sys.path.insert(0, place)
    import orchard_env
    return orchard_env


def load_or_none():
    """orchard_env, or None on a machine without it (for modules whose other
    tests must still run; mark the SDK's own tests with needs_sdk)."""
    place = sdk_dir()
    if not place or not os.path.isfile(os.path.join(place, "orchard_env", "__init__.py")):
        return None
    if place not in sys.path:
        sys.path.insert(0, place)
    import orchard_env
    return orchard_env


needs_sdk = pytest.mark.skipif(sdk_dir() is None, reason="Orchard's SDK is not here (ORCHARD_SDK_DIR, %s)"
                               % ", ".join(PLACES))


@contextlib.contextmanager
def sdk_env(stack, key=None):
    """The environment an SDK user sets for stack, restored afterwards."""
    names = ("SANDBOX_BASE_URL", "SANDBOX_API_KEY", "SANDBOX_PREFIX", "REQUESTS_CA_BUNDLE",
             "SSL_CERT_FILE", "WEBSOCKET_CLIENT_CA_BUNDLE")
    saved = {n: os.environ.get(n) for n in names}
    os.environ.update(SANDBOX_BASE_URL=stack.url, SANDBOX_API_KEY=key or stack.admin_key,
                      REQUESTS_CA_BUNDLE=stack.cacert, SSL_CERT_FILE=stack.cacert,
                      WEBSOCKET_CLIENT_CA_BUNDLE=stack.cacert)
    os.environ.pop("SANDBOX_PREFIX", None)
    _forget_aiohttp_ssl_context()
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
        _forget_aiohttp_ssl_context()


def _forget_aiohttp_ssl_context():
    try:
        from aiohttp.connector import TCPConnector
    except ImportError:
        return
    make = getattr(TCPConnector, "_make_ssl_context", None)
    if hasattr(make, "cache_clear"):
        make.cache_clear()
