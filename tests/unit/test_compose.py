"""The compose stack: every service is health-checked, keys pass through, the store is on the host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _services() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services: dict[str, Any] = compose["services"]
    return services


def test_every_service_has_a_healthcheck_command() -> None:
    services = _services()
    assert set(services) == {"redis", "worker", "beat", "flower"}
    for name, service in services.items():
        test = service["healthcheck"]["test"]
        assert test[0] in {"CMD", "CMD-SHELL"} and len(test) > 1, name


def test_provider_keys_pass_through_with_empty_defaults() -> None:
    for name in ("worker", "beat", "flower"):
        env = _services()[name]["environment"]
        assert env["ANTHROPIC_API_KEY"] == "${ANTHROPIC_API_KEY:-}", name
        assert env["OPENAI_API_KEY"] == "${OPENAI_API_KEY:-}", name
    assert _services()["flower"]["environment"]["RETOLD_FLOWER_AUTH"] == "${RETOLD_FLOWER_AUTH:-}"


def test_the_store_lives_in_a_host_directory_every_retold_service_mounts() -> None:
    for name in ("worker", "beat", "flower"):
        service = _services()[name]
        assert service["environment"]["RETOLD_STORE"] == "/data/memory.sqlite", name
        host, container = service["volumes"][0].split(":")[:2]
        # a bind mount (a path), not a named volume, so agents on the host open the same file
        assert host.startswith("./") and container == "/data", name
    beat = _services()["beat"]["command"]
    assert beat[beat.index("-s") + 1].startswith("/data/")
