"""The compose stack: every service is health-checked, keys pass through, the SQLite store is
on the host, and the `postgres` profile runs a second stack against a PostgreSQL service."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from retold.config.env import store_key

ROOT = Path(__file__).resolve().parents[2]
SQLITE_STACK = ("worker", "beat", "flower")
PG_STACK = ("worker-pg", "beat-pg", "flower-pg")


def _compose() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return compose


def _services() -> dict[str, Any]:
    services: dict[str, Any] = _compose()["services"]
    return services


def _interpolated(value: str) -> str:
    """``value`` as compose sees it with none of its variables set: each ``${VAR:-default}``
    becomes its default."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_every_service_has_a_healthcheck_command() -> None:
    services = _services()
    assert set(services) == {"store-dir", "redis", "postgres", *SQLITE_STACK, *PG_STACK}
    for name, service in services.items():
        if name == "store-dir":
            continue  # one-shot: it exits once the directory is owned
        test = service["healthcheck"]["test"]
        assert test[0] in {"CMD", "CMD-SHELL"} and len(test) > 1, name


def test_provider_keys_pass_through_with_empty_defaults() -> None:
    for name in (*SQLITE_STACK, *PG_STACK):
        env = _services()[name]["environment"]
        assert env["ANTHROPIC_API_KEY"] == "${ANTHROPIC_API_KEY:-}", name
        assert env["OPENAI_API_KEY"] == "${OPENAI_API_KEY:-}", name
    for name in ("flower", "flower-pg"):
        assert _services()[name]["environment"]["RETOLD_FLOWER_AUTH"] == "${RETOLD_FLOWER_AUTH:-}"


def test_the_store_lives_in_a_host_directory_every_retold_service_mounts() -> None:
    for name in SQLITE_STACK:
        service = _services()[name]
        assert "profiles" not in service, name  # `docker compose up` still starts the SQLite stack
        assert service["environment"]["RETOLD_STORE"] == "/data/memory.sqlite", name
        host, container = service["volumes"][0].split(":")[:2]
        # a bind mount (a path), not a named volume, so agents on the host open the same file
        assert host.startswith("./") and container == "/data", name
    beat = _services()["beat"]["command"]
    assert beat[beat.index("-s") + 1].startswith("/data/")


def test_the_postgres_service_keeps_its_data_in_a_named_volume_and_is_checked_with_pg_isready() -> None:
    postgres = _services()["postgres"]
    assert postgres["image"].startswith("postgres:")  # the official image
    assert postgres["profiles"] == ["postgres"]
    volume, mount = postgres["volumes"][0].split(":")[:2]
    assert volume in _compose()["volumes"] and mount == "/var/lib/postgresql/data"
    # the image keeps its data there only before 18 (later ones use a versioned directory)
    assert int(postgres["image"].split(":")[1].split(".")[0]) < 18
    probe = postgres["healthcheck"]["test"][-1]
    env = postgres["environment"]
    assert probe.startswith("pg_isready") and f"-U {env['POSTGRES_USER']}" in probe
    assert f"-d {env['POSTGRES_DB']}" in probe


def test_the_postgres_profile_runs_workers_beat_and_flower_against_the_database() -> None:
    services = _services()
    db = services["postgres"]["environment"]
    for name in PG_STACK:
        service = services[name]
        assert service["profiles"] == ["postgres"], name
        env = service["environment"]
        url = _interpolated(env["RETOLD_STORE"])
        assert url.startswith("postgresql+psycopg://") and store_key(url) == "url", name
        parts = urlsplit(url)
        assert (parts.hostname, parts.username, parts.path) == (
            "postgres", db["POSTGRES_USER"], f"/{db['POSTGRES_DB']}"), name
        assert parts.password == _interpolated(db["POSTGRES_PASSWORD"]), name
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy", name
        assert service["depends_on"]["redis"]["condition"] == "service_healthy", name
        # no host directory but the config file: the database holds everything
        assert not [v for v in service.get("volumes", [])
                    if v.startswith(("./", "/")) and not v.startswith("./config.yaml:")], name
    assert services["worker-pg"]["command"] == services["worker"]["command"]


def test_each_stack_meets_on_a_broker_database_of_its_own() -> None:
    services = _services()
    sqlite = {services[name]["environment"]["RETOLD_BROKER_URL"] for name in SQLITE_STACK}
    pg = {services[name]["environment"]["RETOLD_BROKER_URL"] for name in PG_STACK}
    # one broker per stack, and not the same one: a SQLite worker must never take a
    # session that lives in PostgreSQL, nor the other way round
    assert len(sqlite) == len(pg) == 1 and sqlite != pg


def test_the_image_installs_the_postgres_extra() -> None:
    installs = [line for line in (ROOT / "Dockerfile").read_text().splitlines()
                if line.startswith("RUN pip install") and "'.[" in line]
    assert len(installs) == 1
    extras = installs[0].split("'.[", 1)[1].split("]", 1)[0].split(",")
    assert "postgres" in extras and "scale" in extras
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("psycopg") for dep in declared["postgres"])
    assert any(dep.startswith("faiss-cpu") for dep in declared["scale"])


def test_the_readme_starts_the_postgres_stack_compose_defines() -> None:
    page = (ROOT / "docs" / "postgresql.md").read_text()
    section = page[page.index("## With compose\n"):page.index("## What changes operationally\n")]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "docs/postgresql.md lost its compose commands"
    up = next(line for line in block.group(1).splitlines() if "docker compose up" in line)
    named = up.split("#")[0].split("--build", 1)[1].split()
    services = _services()
    assert named and set(named) == set(PG_STACK)
    assert all(services[name]["profiles"] == ["postgres"] for name in named)
    # the agents' broker is the one the PostgreSQL stack consumes from, as the host sees it
    broker = _interpolated(services["worker-pg"]["environment"]["RETOLD_BROKER_URL"])
    assert broker.replace("redis://redis:", "redis://127.0.0.1:") in block.group(1)


def test_services_run_unprivileged_as_the_operators_uid_over_a_directory_made_theirs() -> None:
    services = _services()
    for name in (*SQLITE_STACK, *PG_STACK):
        assert services[name]["user"] == "${RETOLD_UID:-1000}:${RETOLD_GID:-1000}", name
    for name in SQLITE_STACK:
        # nothing opens the store before the directory belongs to that user
        assert services[name]["depends_on"]["store-dir"]["condition"] == "service_completed_successfully"
    init = services["store-dir"]
    assert init["user"] == "0:0" and init["volumes"] == ["./data:/data"]
    assert "chown ${RETOLD_UID:-1000}:${RETOLD_GID:-1000} /data" in init["command"][-1]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "\nUSER retold\n" in dockerfile and "useradd --uid \"$RETOLD_UID\"" in dockerfile


def test_the_config_is_the_operators_file_mounted_read_only_not_baked_in() -> None:
    services = _services()
    for name in (*SQLITE_STACK, *PG_STACK):
        service = services[name]
        assert "./config.yaml:/app/config.yaml:ro" in service["volumes"], name
        assert service["environment"]["RETOLD_CONFIG"] == "/app/config.yaml", name
    copies = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("COPY")]
    assert not [line for line in copies if "config.yaml" in line]


def test_redis_is_published_on_the_host_only_by_the_host_agents_file() -> None:
    assert "ports" not in _services()["redis"]
    extra = yaml.safe_load((ROOT / "docker-compose.host-agents.yml").read_text())
    (published,) = extra["services"]["redis"]["ports"]
    assert _interpolated(published) == "127.0.0.1:6379:6379"  # loopback only


def _restarts(policy: str | None, exit_code: int) -> bool:
    """Whether Docker restarts a container that exited with ``exit_code`` under ``policy``
    (a service's ``restart:``), as the engine reads it."""
    if policy in (None, "no"):
        return False
    if policy in ("always", "unless-stopped"):
        return True
    assert policy.startswith("on-failure"), policy  # on-failure or on-failure:N
    return exit_code != 0


def test_a_worker_that_exits_after_a_lost_acknowledgement_is_started_again() -> None:
    from workers.liveness import EXIT_ACK_LOST

    services = _services()
    overlay = yaml.safe_load((ROOT / "docker-compose.host-agents.yml").read_text())["services"]
    long_running = [name for name in services if name != "store-dir"]
    assert {*SQLITE_STACK, *PG_STACK} <= set(long_running)
    for name in long_running:
        policy = overlay.get(name, {}).get("restart", services[name].get("restart"))
        # a lost acknowledgement is a non-zero exit the worker chose, for exactly this policy
        assert _restarts(policy, EXIT_ACK_LOST), name
        assert _restarts(policy, 137), name  # killed (out of memory) is restarted too
    # the one-shot exits 0 when done; a policy that restarts that would rerun it forever
    assert not _restarts(services["store-dir"].get("restart"), 0)


def _dockerfile_runs() -> list[str]:
    """The Dockerfile's RUN commands, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [line[len("RUN "):] for line in text.splitlines() if line.startswith("RUN ")]


def _image_user(uid: str) -> str:
    """The name of the user the Dockerfile creates with ``uid`` as its default uid."""
    text = (ROOT / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (RETOLD_[UG]ID)=(\d+)$", text, re.M))
    useradd = re.search(r'useradd --uid "\$(\w+)" .* (\w+)$', text, re.M)
    assert useradd is not None, "the Dockerfile no longer creates its user with useradd"
    assert args[useradd.group(1)] == uid, f"the image's user is not uid {uid}"
    return useradd.group(2)


def test_every_folder_a_service_writes_is_in_the_image_owned_by_its_user() -> None:
    compose = _compose()
    named = set(compose.get("volumes") or {})
    made: set[str] = set()
    owned: dict[str, set[str]] = {}
    for command in _dockerfile_runs():
        for step in re.split(r"&&|;", command):
            words = step.split()
            if words[:2] == ["mkdir", "-p"]:
                made.update(words[2:])
            elif words[:1] == ["chown"] and not words[1].startswith("-"):
                owned.setdefault(words[1], set()).update(words[2:])
    checked = 0
    for name, service in compose["services"].items():
        if service.get("image") != "retold:latest" or name == "store-dir":
            continue
        uid, gid = _interpolated(service["user"]).split(":")
        # compose builds the image with the uid the services run as, so the two agree
        assert isinstance(service["build"], dict), f"{name}: the image is built without the services' uid"
        args = service["build"]["args"]
        assert (_interpolated(args["RETOLD_UID"]), _interpolated(args["RETOLD_GID"])) == (uid, gid), name
        user = _image_user(uid)
        for volume in service.get("volumes", []):
            source, mount, *mode = volume.split(":")
            if mode == ["ro"]:
                continue  # read-only: the config file
            assert source in named or source.startswith("./"), volume
            assert mount in made, f"{name}: the image never creates {mount}"
            assert mount in owned.get(f"{user}:{user}", set()), f"{name}: {mount} is not {user}'s"
            checked += 1
    assert checked >= len(SQLITE_STACK) + 1  # /data for each, and beat-pg's /beat
