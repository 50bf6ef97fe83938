"""The compose commands and healthchecks, run as real processes against Redis (no Docker).

Each service's command line comes from docker-compose.yml as written; only `/data` (and
the PostgreSQL stack's `/beat`) is pointed at a temporary directory, `celery` at this
interpreter's Celery, and the PostgreSQL stack's store at a fresh schema of the test
database. A healthcheck must fail before its process is up and pass once it is, as Docker
would see it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests import postgres, sql
from tests.celery_support import killed_at_exit
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BROKER = "redis://127.0.0.1:6379/13"  # a database no other test uses
DEADLINE_S = 60.0


def _service(name: str) -> dict[str, Any]:
    service: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][name]
    return service


def _local(text: str, data: Path, port: int = 5555) -> str:
    # compose turns `$$` into `$` before the shell sees it
    for mount in ("/data", "/beat"):
        text = text.replace(mount, str(data))
    return text.replace("$$", "$").replace("5555", str(port))


def _healthy(name: str, env: dict[str, str], data: Path, port: int = 5555) -> bool:
    test = _service(name)["healthcheck"]["test"]
    if test[0] == "CMD-SHELL":
        argv = ["sh", "-c", _local(test[1], data, port)]
    else:
        argv = [_local(arg, data, port) for arg in test[1:]]
    result = subprocess.run(argv, cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    return result.returncode == 0


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  model: fake\n")
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "RETOLD_CONFIG": str(config), "RETOLD_STORE": str(tmp_path / "memory.sqlite"),
            "RETOLD_BROKER_URL": BROKER, "HOSTNAME": f"compose-{os.getpid()}-{socket.gethostname()}",
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    with killed_at_exit() as procs:
        yield procs


def _start(name: str, env: dict[str, str], data: Path, extra: list[str],
           procs: list[subprocess.Popen[bytes]], port: int = 5555) -> None:
    command = [_local(arg, data, port) for arg in _service(name)["command"]]
    assert command[0] == "celery", name
    procs.append(subprocess.Popen([sys.executable, "-m", *command, *extra], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


def _until_healthy(name: str, env: dict[str, str], data: Path, port: int = 5555) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if _healthy(name, env, data, port):
            return
        time.sleep(1)  # Docker's interval between probes, shortened
    pytest.fail(f"{name}'s healthcheck never passed")


def _pg_store(request: pytest.FixtureRequest) -> str:
    """A fresh schema of the test database, spelt as compose spells the store URL."""
    return postgres.fresh_schema(request.getfixturevalue("pg_database")).replace(
        "postgresql://", "postgresql+psycopg://", 1)


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.parametrize("name", ["worker", "beat", "flower", "worker-pg", "beat-pg", "flower-pg"])
def test_healthcheck_fails_before_and_passes_once_the_compose_command_runs(
    name: str, tmp_path: Path, env: dict[str, str], started: list[subprocess.Popen[bytes]],
    request: pytest.FixtureRequest,
) -> None:
    port = free_port()
    extra = {
        # in a container the node name is celery@$HOSTNAME by default; here the host name differs
        "worker": ["-n", f"celery@{env['HOSTNAME']}"],
        "beat": [],
        "flower": ["--address=127.0.0.1"],
    }[name.removesuffix("-pg")]
    # Flower's probe must pass with basic auth on, since that is how it is deployed;
    # the probe's `python` is this interpreter, whose directory leads PATH in `env`
    env = {**env, "RETOLD_FLOWER_AUTH": "admin:secret"}
    if name.endswith("-pg"):
        env["RETOLD_STORE"] = _pg_store(request)
    assert not _healthy(name, env, tmp_path, port)
    _start(name, env, tmp_path, extra, started, port)
    _until_healthy(name, env, tmp_path, port)
    assert started[0].poll() is None
    if name == "worker-pg":
        # the pool's process built its runtime on the database, which created the schema there
        assert sql.rows(env["RETOLD_STORE"], "SELECT count(*) FROM schema_migrations")[0][0] > 0
    if name.endswith("-pg"):
        assert not list(tmp_path.glob("*.sqlite*"))  # nothing of the PostgreSQL stack is a file


@pytest.mark.skipif(shutil.which("pg_isready") is None,
                    reason="pg_isready (PostgreSQL's client) is not installed")
def test_the_postgres_healthcheck_passes_for_a_server_that_answers(pg_database: str) -> None:
    probe = _service("postgres")["healthcheck"]["test"]
    assert probe[0] == "CMD-SHELL"
    server = urlsplit(postgres.SERVER)
    answering = f"{probe[1]} -h {server.hostname} -p {server.port or 5432}"
    assert subprocess.run(["sh", "-c", answering], capture_output=True, timeout=30).returncode == 0
    silent = f"{probe[1]} -h 127.0.0.1 -p {free_port()}"
    assert subprocess.run(["sh", "-c", silent], capture_output=True, timeout=30).returncode != 0
