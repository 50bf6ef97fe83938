"""The repository's deployment files: compose services, worker app and beat schedule."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_runs_redis_worker_beat_and_flower_from_our_image() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) >= {"redis", "worker", "beat", "flower"}
    for name in ("worker", "beat", "flower"):
        service = services[name]
        assert service["build"] == "."
        assert service["command"][:3] == ["celery", "-A", "workers"]
        assert service["environment"]["RETOLD_BROKER_URL"].startswith("redis://redis:")
    assert services["beat"]["command"][3] == "beat"
    assert services["flower"]["command"][3] == "flower"
    assert (ROOT / "Dockerfile").exists()


def test_worker_app_uses_json_late_acks_and_the_embedded_broker_by_default(tmp_path: Path) -> None:
    from retold.config import load_config
    from workers.app import create_app

    app = create_app(load_config(overrides={"store": {"path": str(tmp_path / "m.sqlite")}}))
    assert app.conf.broker_url == f"sqla+sqlite:///{tmp_path / 'queue.sqlite'}"
    assert app.conf.task_serializer == "json" and app.conf.accept_content == ["json"]
    assert app.conf.task_acks_late and app.conf.task_reject_on_worker_lost
    assert app.conf.worker_prefetch_multiplier == 1
    redis_app = create_app(load_config(overrides={"queue": {"broker_url": "redis://127.0.0.1:6379/0"}}))
    assert redis_app.conf.broker_url == "redis://127.0.0.1:6379/0"


def test_beat_schedule_is_plain_data() -> None:
    import beat_schedule

    assert isinstance(beat_schedule.SCHEDULE, dict)
