"""How the store's shared SQL reaches PostgreSQL, and how a store target is read."""

from __future__ import annotations

from retold.config import read_config
from retold.config.env import load_config_from_environment
from retold.store import open_store
from retold.store.postgres.connection import translate_named, translate_sql
from retold.store.postgres.url import conninfo, redact


def test_placeholders_become_psycopg_ones_and_literals_keep_their_percent() -> None:
    sql, order = translate_sql("SELECT id FROM records WHERE a = ? AND ref LIKE 'session:%' AND b = ?")
    assert sql == "SELECT id FROM records WHERE a = %s AND ref LIKE 'session:%%' AND b = %s"
    assert order is None


def test_numbered_placeholders_repeat_their_parameter() -> None:
    sql, order = translate_sql("SELECT 1 WHERE x = ?1 OR y = ?2 OR z = ?1")
    assert sql == "SELECT 1 WHERE x = %s OR y = %s OR z = %s"
    assert order == (0, 1, 0)


def test_named_parameters_and_temp_tables() -> None:
    translated = translate_named("SELECT :at, 'a:b', v::int FROM temp.t")
    assert translated == "SELECT %(at)s, 'a:b', v::int FROM pg_temp.t"


def test_the_translation_changes_placeholders_never_a_conflict_target() -> None:
    sql, _ = translate_sql("INSERT INTO store_meta(key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING")
    assert sql == "INSERT INTO store_meta(key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING"


def test_a_url_selects_postgresql_and_a_path_selects_sqlite() -> None:
    url = "postgresql+psycopg://retold:secret@db:5432/memory"
    from_env = load_config_from_environment({"RETOLD_STORE": url})
    assert (from_env.store.url, from_env.store.target) == (url, url)
    assert load_config_from_environment({"RETOLD_STORE": "x.sqlite"}).store.target == "x.sqlite"
    assert read_config(overrides={"store": {"url": url}}).store.target == url
    assert read_config().store.url is None


def test_urls_drop_the_driver_suffix_and_hide_the_password() -> None:
    url = "postgresql+psycopg://retold:secret@db:5432/memory?options=-csearch_path%3Dt1"
    assert conninfo(url).startswith("postgresql://retold:secret@db:5432/memory?")
    assert "default_transaction_read_only" in conninfo(url, read_only=True)
    assert "search_path" in conninfo(url, read_only=True)
    assert "secret" not in redact(url)


def test_a_store_names_its_url_without_the_password(pg_database: str) -> None:
    from tests.postgres import fresh_schema

    url = fresh_schema(pg_database).replace("postgres@", "postgres:secret@", 1)  # trust auth ignores it
    store = open_store(url)
    try:
        assert "secret" not in store.path and store.backend == "postgres"
        other = store.second_connection()
        assert other.records_version() == store.records_version() == 0
        other.close()
    finally:
        store.close()
