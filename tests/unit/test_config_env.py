"""One configuration for every process: the file and variables an agent's runtime, the CLI
and the workers read, in one order."""

from __future__ import annotations

from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.broker import CeleryScheduler
from retold.config.env import load_config_from_environment
from retold.config.env import store_target as store_keys
from retold.errors import ConfigError

REDIS = "redis://127.0.0.1:6390/3"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"store:\n  path: {tmp_path / 'file.sqlite'}\nembedding:\n  model: fake\n"
                    "queue:\n  broker_url: redis://127.0.0.1:6390/1\n")
    return path


def test_the_file_named_by_retold_config_is_read(config_file: Path, tmp_path: Path) -> None:
    config = load_config_from_environment({"RETOLD_CONFIG": str(config_file)})
    assert config.store.path == str(tmp_path / "file.sqlite")
    assert config.queue.broker_url == "redis://127.0.0.1:6390/1"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert load_config_from_environment({}, cwd=empty).store.path == "./memory.sqlite"  # defaults alone


def test_a_config_yaml_in_the_working_folder_is_read_when_nothing_names_a_file(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_config_from_environment({}, cwd=tmp_path).store.path == str(tmp_path / "file.sqlite")
    other = tmp_path / "other.yaml"
    other.write_text("queue:\n  extraction_queue: other-extraction\n")
    named = load_config_from_environment({"RETOLD_CONFIG": str(other)}, cwd=tmp_path)
    assert (named.queue.extraction_queue, named.store.path) == ("other-extraction", "./memory.sqlite")
    # the public front door looks in the process's own working folder and variables
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RETOLD_BROKER_URL", REDIS)
    monkeypatch.delenv("RETOLD_CONFIG", raising=False)
    monkeypatch.delenv("RETOLD_STORE", raising=False)
    found = load_config()
    assert (found.store.path, found.queue.broker_url) == (str(tmp_path / "file.sqlite"), REDIS)
    explicit = load_config(other, overrides={"store": {"path": "mine.sqlite"}})
    assert (explicit.queue.extraction_queue, explicit.queue.broker_url, explicit.store.path) == (
        "other-extraction", REDIS, "mine.sqlite")


def test_variables_beat_the_file_and_explicit_overrides_beat_both(config_file: Path, tmp_path: Path) -> None:
    env = {"RETOLD_CONFIG": str(config_file), "RETOLD_STORE": str(tmp_path / "env.sqlite"),
           "RETOLD_BROKER_URL": REDIS}
    config = load_config_from_environment(env)
    assert (config.store.path, config.queue.broker_url) == (str(tmp_path / "env.sqlite"), REDIS)
    assert config.embedding.model == "fake"  # the rest of the file still applies
    flag = load_config_from_environment(env, overrides={"store": {"path": str(tmp_path / "flag.sqlite")}})
    assert flag.store.path == str(tmp_path / "flag.sqlite")


def test_an_explicit_path_beats_retold_config_and_empty_variables_count_as_unset(
    config_file: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("queue:\n  extraction_queue: other-extraction\n")
    config = load_config_from_environment(
        {"RETOLD_CONFIG": str(config_file), "RETOLD_STORE": " ", "RETOLD_BROKER_URL": ""}, other)
    assert config.queue.extraction_queue == "other-extraction"
    assert (config.store.path, config.queue.broker_url) == ("./memory.sqlite", None)


def test_a_missing_config_file_is_one_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nowhere.yaml: config file not found"):
        load_config_from_environment({"RETOLD_CONFIG": str(tmp_path / "nowhere.yaml")})


def test_an_agent_runtime_and_a_worker_read_the_same_config(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.app import config_from_environment, create_app

    env = {"RETOLD_CONFIG": str(config_file), "RETOLD_BROKER_URL": REDIS}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RETOLD_STORE", raising=False)
    worker_config = config_from_environment()
    with build_runtime(environ=env) as rt:  # an agent given no config
        assert rt.config == worker_config
        assert rt.store.path == str(tmp_path / "file.sqlite")
        assert isinstance(rt.scheduler, CeleryScheduler)
        assert rt.scheduler.broker_url == REDIS == create_app(worker_config).conf.broker_url


PG_URL = "postgresql+psycopg://retold@db.internal:5432/retold"


def test_a_store_url_from_the_environment_reaches_agents_and_workers_alike(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.app import config_from_environment

    env = {"RETOLD_CONFIG": str(config_file), "RETOLD_STORE": PG_URL}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    worker = config_from_environment()
    assert worker == load_config_from_environment(env)  # what an agent's build_runtime() loads
    assert (worker.store.url, worker.store.target) == (PG_URL, PG_URL)


def test_a_later_layer_that_names_a_file_replaces_an_earlier_url(tmp_path: Path) -> None:
    shared = tmp_path / "shared.yaml"
    shared.write_text(f"store:\n  url: {PG_URL}\nembedding:\n  model: fake\n")
    local = str(tmp_path / "local.sqlite")
    # the variable beats the file, though the file's key is the URL
    from_env = load_config_from_environment({"RETOLD_CONFIG": str(shared), "RETOLD_STORE": local})
    assert (from_env.store.url, from_env.store.target) == (None, local)
    # an explicit path (``retold --store``) beats a URL in the variable
    flag = load_config_from_environment({"RETOLD_STORE": PG_URL}, overrides={"store": {"path": local}})
    assert flag.store.target == local
    # and a URL in a later layer still beats a path in an earlier one
    assert load_config_from_environment({"RETOLD_STORE": local},
                                        overrides={"store": {"url": PG_URL}}).store.target == PG_URL
    # a URL in the variable beats a path in the file, and --store's keys for a path clear it
    with_path = tmp_path / "path.yaml"
    with_path.write_text(f"store:\n  path: {tmp_path / 'file.sqlite'}\n")
    env = {"RETOLD_CONFIG": str(with_path), "RETOLD_STORE": PG_URL}
    assert load_config_from_environment(env).store.target == PG_URL
    back = load_config_from_environment(env, overrides={"store": store_keys(local)})
    assert back.store.target == local and back.store.url is None
