"""Shared fixtures: real PostgreSQL (via pytest-django), S3 through moto's server over HTTP."""

from __future__ import annotations

import logging
import os
import sys
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from django.test.testcases import LiveServerThread
from moto.server import ThreadedMotoServer

from dandizarr_server.httpserver import NoDelayThreadedWSGIServer
from tests.support import rollback_db
from tests.support.fixture_params import PARAM_FIXTURE
from tests.support.hypothesis_profiles import load_profile as load_hypothesis_profile
from tests.support.processes import Processes
from tests.support.seaweedfs import SeaweedS3

# --cpu-durations=N: the steps that used the most CPU (issue #37).
pytest_plugins = ["tests.support.cpu_durations"]

# Credentials for moto only; set before any boto3 client exists.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

# The live test service answers like ``dandizarr serve`` (no 40 ms Nagle stall per reply).
LiveServerThread.server_class = NoDelayThreadedWSGIServer


# Hypothesis' example counts: the dev or ci profile (tests/support/hypothesis_profiles.py).
load_hypothesis_profile()

# A test is ``live`` when its fixtures start a server or a process: the service over HTTP
# (live_server), SeaweedFS, Chromium, or anything run through ``processes`` (the CLI,
# ``dandizarr serve``, Celery workers, the dandi CLI). moto's S3 is not: one in-memory server in
# a thread of each pytest process, shared by the tests that only need a bucket.
LIVE_FIXTURES = frozenset({"live_server", "seaweedfs", "browser", "processes"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{PARAM_FIXTURE}(name): the fixture a parametrized fixture's param sets up "
        "(tests/support/fixture_params.py)",
    )
    # Tests hash passwords with MD5, not PBKDF2's ~1,000,000 rounds (a quarter second each): no
    # test is about the hasher, and the login-limit tests hash at every attempt.
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # pytest-xdist's, named here too: a run with -p no:xdist still collects the groups' tests.
    config.addinivalue_line("markers", "xdist_group(name): tests one xdist worker runs in turn")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Mark ``live`` every test whose fixtures start a server or a process, so that
    ``-m "not live"`` is a fast inner loop. The fixtures a param sets up by name count as the
    test's own: added here, before pytest-django (tryfirst, registered later: called first)
    reads them to order tests and to create the test database."""
    for item in items:
        _add_param_fixtures(session, item)
        if LIVE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.live)
    _deselect_big_unless_asked(session.config, items)


def _deselect_big_unless_asked(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``big`` (minutes, gigabytes of disk) runs only when ``-m`` names
    ``big`` (``make test-big``): not in ``make test``, nor in a run of its file or directory."""
    if "big" in (config.getoption("markexpr") or ""):
        return
    big = [item for item in items if item.get_closest_marker("big") is not None]
    if big:
        config.hook.pytest_deselected(items=big)
        items[:] = [item for item in items if item.get_closest_marker("big") is None]


def _add_param_fixtures(session: pytest.Session, item: pytest.Item) -> None:
    names = tuple(mark.args[0] for mark in item.iter_markers(PARAM_FIXTURE))
    if not names or not isinstance(item, pytest.Function):
        return
    closure, _ = session._fixturemanager.getfixtureclosure(item, names, ignore_args=frozenset())
    # The item's own list (its siblings share the one pytest computed for the function).
    item.fixturenames = [*item.fixturenames, *(n for n in closure if n not in item.fixturenames)]


# The test running now, while it is not live: a process it starts is recorded (sys.audit) and
# fails it, whatever started the process (nothing else can see a subprocess started deep in a
# helper). Recorded rather than refused, so no library falls back silently on a refusal.
_not_live_test: list[pytest.Item] = []
_processes_started: list[str] = []


def _record_processes(event: str, args: tuple[Any, ...]) -> None:
    if _not_live_test and event in ("subprocess.Popen", "os.system", "os.posix_spawn"):
        _processes_started.append(f"{event} {args[1] if len(args) > 1 else args[0]!r}")


sys.addaudithook(_record_processes)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    live = item.get_closest_marker("live") is not None
    if not live:
        _not_live_test.append(item)
    try:
        return (yield)
    finally:
        if not live:
            _not_live_test.clear()
        _processes_started.clear()


@pytest.fixture(autouse=True)
def _processes_only_in_live_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if _processes_started and request.node.get_closest_marker("live") is None:
        started = "; ".join(_processes_started[:3])
        pytest.fail(
            f"this test is not marked live but started a process ({started}): start it "
            "through the `processes` fixture (or another of tests/conftest.py LIVE_FIXTURES)",
            pytrace=False,
        )


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Programs this test runs (the CLI, ``dandizarr serve``, Celery workers, any other): a test
    that asks for it is live. Those still running at the end are stopped."""
    started = Processes()
    yield started
    started.stop_all()


@pytest.fixture(scope="session", autouse=True)
def _rollback_db_as_production() -> Iterator[None]:
    """Rollback-per-test databases (``db``) run on-commit work when production would and see
    other threads' queries (tests/support/rollback_db.py); inert under ``transactional_db``."""
    rollback_db.install()
    yield
    rollback_db.uninstall()


@pytest.fixture(autouse=True)
def _no_other_thread_reads_a_rollback_db(request: pytest.FixtureRequest) -> Iterator[None]:
    marker = request.node.get_closest_marker("django_db")
    transactional = bool(
        marker and (marker.kwargs.get("transaction") or marker.args[:1] == (True,))
    )
    fixtures = set(request.fixturenames)
    if "db" not in fixtures or transactional or fixtures & {"transactional_db", "live_server"}:
        yield
        return
    rollback_db.ThreadQueries.watch()
    yield
    seen = rollback_db.ThreadQueries.stop()
    if seen:
        pytest.fail(
            "another thread queried this test's database, where the test's rows are "
            f"uncommitted and invisible to it ({'; '.join(seen[:2])}): ask for "
            "transactional_db (or pytest.mark.django_db(transaction=True))",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """One test database per pytest process, so concurrent runs on one server don't collide."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.postgresql":
        raise pytest.UsageError(
            "the test suite runs against PostgreSQL: set DATABASE_URL (make test does this)"
        )
    database.setdefault("TEST", {})
    database["TEST"]["NAME"] = f"test_dandizarr_{os.getpid()}"


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's S3 in server mode on a free port; yields its endpoint URL."""
    # werkzeug's server logs a line per request at INFO, formatted and written for nothing: a
    # tenth of moto's CPU in the object store's tests (docs/testing.md, make test-fast's CPU).
    # Its warnings and errors still show.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def _moto_s3_client(moto_server: str) -> Any:
    """One client for the buckets the tests make (a client per test cost more than its bucket)."""
    return boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")


@pytest.fixture
def s3_bucket(_moto_s3_client: Any) -> str:
    """A fresh, empty bucket on the moto server."""
    name = f"test-{uuid.uuid4().hex[:16]}"
    _moto_s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def seaweedfs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SeaweedS3]:
    """A real S3 server (SeaweedFS) on free ports, for the whole session (one per xdist worker).
    After a session with failures its log is kept where the next runs' clean-up of pytest's
    temporary directories cannot reach it, and said where (a warning, shown in the summary)."""
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    yield server
    server.stop()
    if request.session.testsfailed:
        kept = server.keep_log()
        warnings.warn(f"SeaweedFS's log of this failed session: {kept}", stacklevel=1)


@pytest.fixture
def seaweedfs_bucket(seaweedfs: SeaweedS3) -> str:
    """A fresh, empty bucket on the SeaweedFS server."""
    return seaweedfs.create_bucket(f"test-{uuid.uuid4().hex[:16]}")


@pytest.fixture(autouse=True)
def _structlog_keeps_its_chain() -> Iterator[None]:
    """A test that leaves structlog configured with another list of processors strands the
    loggers cached on first use on the old list, out of reach of later tests' capture_logs: the
    order-dependent failure this guard names where it starts."""
    import structlog

    before = structlog.get_config()["processors"]
    yield
    if structlog.get_config()["processors"] is not before:
        pytest.fail(
            "this test configured structlog with a new list of processors: loggers cached on "
            "first use keep the old one (configure through "
            "dandizarr_server.logging_config.structured_logging, which keeps the list)",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    """Each test starts with an empty Django cache: the expensive reads' rate counts
    (zarr_api.edge.throttles) and cached previews of one test never reach the next."""
    from django.core.cache import cache

    cache.clear()
    yield
