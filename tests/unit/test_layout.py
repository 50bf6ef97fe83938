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
        build = service["build"]
        assert (build if isinstance(build, str) else build["context"]) == "."
        assert service["command"][:3] == ["celery", "-A", "workers"]
        assert service["environment"]["RETOLD_BROKER_URL"].startswith("redis://redis:")
    assert services["beat"]["command"][3] == "beat"
    assert services["flower"]["command"][3] == "flower"
    assert (ROOT / "Dockerfile").exists()


def test_worker_app_uses_json_late_acks_and_the_embedded_broker_by_default(tmp_path: Path) -> None:
    from retold.config import read_config
    from workers.app import create_app

    app = create_app(read_config(overrides={"store": {"path": str(tmp_path / "m.sqlite")}}))
    assert app.conf.broker_url == f"sqla+sqlite:///{tmp_path / 'queue.sqlite'}"
    assert app.conf.task_serializer == "json" and app.conf.accept_content == ["json"]
    assert app.conf.task_acks_late and app.conf.task_reject_on_worker_lost
    assert app.conf.worker_prefetch_multiplier == 1
    redis_app = create_app(read_config(overrides={"queue": {"broker_url": "redis://127.0.0.1:6379/0"}}))
    assert redis_app.conf.broker_url == "redis://127.0.0.1:6379/0"


def test_beat_schedule_is_plain_data() -> None:
    import beat_schedule

    assert isinstance(beat_schedule.SCHEDULE, dict)


def test_every_compose_service_runs_a_module_and_queues_that_exist() -> None:
    import importlib

    from retold.config import read_config

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    queues = read_config().queue
    known = {queues.extraction_queue, queues.maintenance_queue}
    for name in ("worker", "beat", "flower"):
        command = compose["services"][name]["command"]
        module = importlib.import_module(command[command.index("-A") + 1])
        assert module.app.main == "retold", name
        assert "healthcheck" in compose["services"][name], name
    worker = compose["services"]["worker"]["command"]
    assert set(worker[worker.index("-Q") + 1].split(",")) == known
    assert "healthcheck" in compose["services"]["redis"]
    assert "./data:/data" in compose["services"]["worker"]["volumes"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert '"-Q", "extraction,maintenance"' in dockerfile


def test_tasks_route_to_the_configured_queues_and_the_broker_settings_fit_it(tmp_path: Path) -> None:
    from retold.config import read_config
    from workers import app as default_app
    from workers.app import VISIBILITY_TIMEOUT_SECONDS, create_app

    assert {name for name in default_app.tasks if name.startswith("retold.")} == {
        "retold.extract_session", "retold.review_session", "retold.recover", "retold.temporal_review",
        "retold.expire", "retold.retain", "retold.reembed", "retold.queue_maintenance",
        "retold.end_idle_sessions", "retold.capacity", "retold.backfill", "retold.check",
        "retold.audit_sample",
    }
    config = read_config(overrides={"store": {"path": str(tmp_path / "m.sqlite")},
                                    "queue": {"broker_url": "redis://127.0.0.1:6379/0"}})
    app = create_app(config)
    assert app.conf.task_ignore_result
    assert {q.name for q in app.conf.task_queues} == {"extraction", "maintenance"}
    assert app.conf.task_routes["retold.extract_session"] == {"queue": "extraction"}
    assert app.conf.task_default_queue == "maintenance"
    assert app.conf.broker_transport_options["visibility_timeout"] == VISIBILITY_TIMEOUT_SECONDS
    longest_task_seconds = 60 * config.ingestion.extraction_claim_timeout_minutes
    assert longest_task_seconds < VISIBILITY_TIMEOUT_SECONDS
    assert app.conf.broker_connection_timeout <= 2
    assert "queue_maintenance" not in app.conf.beat_schedule
    assert app.conf.beat_schedule["recover"]["schedule"] == 30  # a dead worker's lease + one sweep <= 1 min
    assert app.conf.beat_schedule["end_idle_sessions"]["schedule"] == 60


def test_the_embedded_broker_polls_quickly_and_sweeps_consumed_messages(tmp_path: Path) -> None:
    from kombu.transport import sqlalchemy as sqla_transport

    from retold.config import read_config
    from workers.app import create_app

    app = create_app(read_config(overrides={"store": {"path": str(tmp_path / "m.sqlite")}}),
                     schedule={"only": {"task": "retold.expire", "seconds": 5}})
    assert sqla_transport.Transport.polling_interval == 0.1
    assert "broker_transport_options" not in app.conf or not app.conf.broker_transport_options
    assert set(app.conf.beat_schedule) == {"only"}
    default = create_app(read_config(overrides={"store": {"path": str(tmp_path / "m.sqlite")}}))
    assert default.conf.beat_schedule["queue_maintenance"]["schedule"] == 3600


def test_schedule_for_drops_embedded_only_entries_for_redis() -> None:
    from beat_schedule import SCHEDULE, schedule_for
    from retold.config import read_config

    assert set(schedule_for(read_config())) == set(SCHEDULE)
    redis = read_config(overrides={"queue": {"broker_url": "redis://127.0.0.1:6379/0"}})
    assert set(schedule_for(redis)) == set(SCHEDULE) - {"queue_maintenance"}
    assert {entry["seconds"] for entry in SCHEDULE.values()} == {30, 60, 300, 600, 900, 3600, 86400, 604800}
    assert SCHEDULE["audit_sample"] == {"task": "retold.audit_sample", "seconds": 7 * 86400}
