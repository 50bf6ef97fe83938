"""build_runtime wires config, store, embedder and index; importing Retold loads no model."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import retold
from retold import build_runtime, load_config
from retold.cli import main
from retold.config.env import store_target as store_keys
from retold.errors import EmbeddingMismatchError, ModelMissingError, StoreError
from retold.index.embedder import DEFAULT_MODEL, INT8_MODEL, FakeEmbedder
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import ExtractionOutput, Principal, SessionSummary
from retold.store import EmbeddingFamily, Store
from retold.store.postgres.url import redact
from retold.testing import make_record

ROOT = Path(__file__).resolve().parents[2]


def fake_config(target: str | Path) -> retold.Config:
    return load_config(overrides={"store": store_keys(str(target)), "embedding": {"model": "fake"}})


def test_runtime_writes_and_finds_a_vector_through_its_index(store_target: str) -> None:
    with build_runtime(fake_config(store_target)) as rt:
        assert isinstance(rt.embedder, FakeEmbedder)
        rec = make_record(content="Aditya prefers concise technical explanations.")
        vec = rt.embedder.embed_documents([rec.content])[0]
        with rt.store.atomic():
            rt.store.write_record(rec)
            version = rt.store.put_embedding(rec.id, rt.embedder.name, rt.embedder.version, vec)
        assert rt.refresh_index() == "reload"  # first refresh loads the index
        rt.index.upsert(rec.id, vec, version)
        assert rt.refresh_index() == "current"
        query = rt.embedder.embed_queries(["concise technical explanations"])[0]
        eligible = rt.store.eligible_ids([rec.scope])
        assert rt.index.search(query, eligible, 3)[0][0] == rec.id


def test_two_runtimes_on_one_store_see_each_others_writes(store_target: str) -> None:
    cfg = fake_config(store_target)
    with build_runtime(cfg) as reader, build_runtime(cfg) as writer:
        reader.refresh_index()
        rec = make_record()
        vec = writer.embedder.embed_documents([rec.content])[0]
        with writer.store.atomic():
            writer.store.write_record(rec)
            writer.store.put_embedding(rec.id, writer.embedder.name, writer.embedder.version, vec)
        assert reader.refresh_index() == "delta"
        assert reader.index.vector_for(rec.id) is not None


def test_close_closes_the_store_and_is_idempotent(store_target: str) -> None:
    rt = build_runtime(fake_config(store_target))
    rt.close()
    rt.close()
    with pytest.raises(Exception):  # noqa: B017 - the driver's error for a closed connection
        rt.store.records_version()


def test_default_runtime_uses_a_store_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with build_runtime() as rt:
        assert rt.embedder.name == "sentence-transformers/all-MiniLM-L6-v2"
        assert not rt.embedder.is_loaded  # the model loads on first use only
    assert (tmp_path / "memory.sqlite").exists()


def test_store_path_that_is_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        Store(tmp_path)


def test_public_surface_is_complete_and_importable() -> None:
    for name in retold.__all__:
        assert hasattr(retold, name), name
    public = {n for n in dir(retold) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(retold.__all__)


def test_importing_retold_and_building_a_runtime_imports_no_torch(tmp_path: Path) -> None:
    overrides = {"store": {"path": str(tmp_path / "x.sqlite")}}
    code = (
        "import sys, retold, retold.cli, workers\n"
        f"rt = retold.build_runtime(retold.load_config(overrides={overrides!r}))\n"
        "rt.close()\n"
        "bad = [m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_importing_retold_and_opening_a_session_imports_no_agent_framework(tmp_path: Path) -> None:
    # Integrations are optional extras: only the adapter a host imports may load its framework.
    overrides = {"store": {"path": str(tmp_path / "x.sqlite")}, "embedding": {"model": "fake"}}
    code = (
        "import sys, retold, retold.cli, retold.adapters.base, retold.tools.export\n"
        f"rt = retold.build_runtime(retold.load_config(overrides={overrides!r}))\n"
        "with rt.session('a', 'u') as s:\n"
        "    s.tools('anthropic'), s.tools('openai')\n"
        "rt.close()\n"
        "frameworks = ('langchain', 'langchain_core', 'langgraph', 'deepagents', 'crewai', 'mcp',"
        " 'openai', 'anthropic', 'starlette', 'jinja2', 'uvicorn')\n"
        "bad = [m for m in frameworks if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_runtime_refuses_a_store_of_another_embedding_family(store_target: str) -> None:
    path = store_target
    with build_runtime(fake_config(path)) as rt:
        assert rt.store.embedding_family() is None  # nothing written yet: any family may start
        rec = make_record()
        with rt.store.atomic():
            rt.store.write_record(rec)
            rt.store.put_embedding(rec.id, rt.embedder.name, rt.embedder.version,
                                   rt.embedder.embed_documents([rec.content])[0])
    other = load_config(overrides={"store": store_keys(path),
                                   "embedding": {"model": "fake", "version": "2", "dims": 8}})
    with pytest.raises(EmbeddingMismatchError) as refused:
        build_runtime(other)
    assert isinstance(refused.value, retold.ConfigError)
    assert str(refused.value) == (
        f"store {redact(path)} holds fake version 1 (384-d) vectors but the config asks for fake version 2"
        " (8-d); run `retold reembed --model fake --version 2 --dims 8` or set"
        " embedding.model/version/dims back to fake / 1 / 384")
    assert "\n" not in str(refused.value)
    with build_runtime(fake_config(path)) as same:  # the refused runtime closed its store
        assert same.refresh_index() == "reload" and len(same.index) == 1
    with build_runtime(other, allow_embedding_mismatch=True) as repairing:
        assert repairing.store.embedding_family() == EmbeddingFamily("fake", "1", 384)


def test_the_int8_model_runs_only_under_a_gate_fitted_for_it(tmp_path: Path) -> None:
    int8 = FakeEmbedder(name=INT8_MODEL, version="1")
    floats = FakeEmbedder(name=DEFAULT_MODEL, version="1")
    default = load_config(overrides={"store": {"path": str(tmp_path / "a.sqlite")}})
    with pytest.raises(retold.ConfigError) as refused:
        build_runtime(default, embedder=int8)
    assert str(refused.value).startswith(
        f"retrieval.gate: the gate is fitted for {DEFAULT_MODEL} but embedding.model is "
        f"{INT8_MODEL}; use the gate block fitted for it (config.yaml's for the float model, "
        "config.int8.yaml's for int8)")
    with build_runtime(default, embedder=floats):
        pass  # the refusal closed the store it had opened
    store = {"store": {"path": str(tmp_path / "b.sqlite")}}
    shipped = load_config(ROOT / "config.int8.yaml", overrides=store)
    assert shipped.embedding.model == INT8_MODEL == shipped.retrieval.gate.calibrated_for
    with build_runtime(shipped, embedder=int8) as rt:
        rt.host.grant("agent", retold.Scope("user", "u1"), read=True, write=True)
        p = Principal("agent", "u1", "s1", None)
        written = rt.tools.call("memory_write", p, {
            "type": "semantic", "source_kind": "agent_inference", "attribute": "drink",
            "content": "The user drinks green tea."})
        assert written["outcome"] == "created"
        found = rt.tools.call("memory_search", p, {"queries": ["green tea"]})
        assert [r["content"] for r in found["results"]] == ["The user drinks green tea."]
    with pytest.raises(retold.ConfigError, match=f"fitted for {INT8_MODEL} but embedding.model is "
                                                 f"{DEFAULT_MODEL}"):
        build_runtime(shipped, embedder=floats)
    # A store of the float model's vectors names the re-embed that switches it.
    with pytest.raises(EmbeddingMismatchError, match=f"holds {INT8_MODEL} version 1 .* asks for "
                                                      f"{DEFAULT_MODEL} version 1"):
        build_runtime(load_config(overrides=store), embedder=floats)


@pytest.mark.filterwarnings("ignore:.*noload.*")  # kombu's SQLAlchemy transport, not ours
def test_a_session_ended_by_a_default_runtime_waits_on_the_queue_its_worker_reads(
    tmp_path: Path, store_target: str,
) -> None:
    from workers.app import create_app

    # No broker configured: the embedded one, beside the store path (which a URL leaves set).
    config = fake_config(store_target).replace({"store": {"path": str(tmp_path / "memory.sqlite")}})
    with build_runtime(config, environ={}) as rt:
        p = Principal("research-agent", "aditya", "s-queued", None)
        rt.hooks.on_turn(p, "user", "Keep every answer short.")
        rt.hooks.on_session_end(p)
    with create_app(config).connection_for_read() as conn:  # what a worker of this config consumes
        queue = conn.SimpleQueue(config.queue.extraction_queue)
        try:
            message = queue.get(timeout=5)
            assert message.headers["task"] == "retold.extract_session"
            assert message.payload[0] == ["s-queued"]
            message.ack()
        finally:
            queue.close()


def test_the_in_process_scheduler_extracts_a_session_when_it_ends(tmp_path: Path, store_target: str) -> None:
    config = fake_config(store_target).replace({"store": {"path": str(tmp_path / "memory.sqlite")},
                                                "queue": {"scheduler": "in_process"}})
    extractor = FakeExtractor(ExtractionOutput([], SessionSummary("Aditya asked for short answers.", [], [])))
    with build_runtime(config, extractor=extractor, reviewer=TableReviewer(), environ={}) as rt:
        p = Principal("research-agent", "aditya", "s-now", None)
        rt.hooks.on_turn(p, "user", "Keep every answer short.")
        rt.hooks.on_session_end(p)
        session = rt.store.get_session("s-now")
        assert session is not None and session.extracted_at is not None
        assert len(extractor.calls) == 1
    assert not (tmp_path / "queue.sqlite").exists()  # no broker involved


def test_an_in_memory_store_needs_the_in_process_scheduler() -> None:
    with pytest.raises(retold.ConfigError, match="queue.scheduler: a worker cannot open a :memory: store"):
        load_config(overrides={"store": {"path": ":memory:"}})
    config = load_config(overrides={"store": {"path": ":memory:"}, "embedding": {"model": "fake"},
                                    "queue": {"scheduler": "in_process"}})
    with build_runtime(config, environ={}) as rt:
        p = Principal("research-agent", "aditya", "s-mem", None)
        rt.hooks.on_turn(p, "user", "Keep every answer short.")
        rt.hooks.on_session_end(p)  # no hosted model: reported, not raised
        assert rt.store.events(kind="extraction.not_configured")


def test_building_a_runtime_imports_no_celery(tmp_path: Path) -> None:
    # The broker is reached on the first session end, so CLI commands never pay for Celery.
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'x.sqlite'}\nembedding:\n  model: fake\n")
    lines = [
        "import sys, retold",
        "rt = retold.build_runtime()",
        "assert type(rt.scheduler).__name__ == 'CeleryScheduler'",
        "rt.close()",
        "assert not {'celery', 'kombu'} & set(sys.modules)",
    ]
    env = {**os.environ, "RETOLD_CONFIG": str(config)}
    subprocess.run([sys.executable, "-c", "\n".join(lines)], check=True, timeout=60, env=env)


def test_a_missing_model_fails_the_build_in_one_line_before_the_store_opens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    store, model = tmp_path / "m.sqlite", tmp_path / "models" / "mini"
    config = load_config(overrides={"store": {"path": str(store)},
                                    "embedding": {"model": str(model), "backend": "sentence-transformers"}})
    if importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("without sentence-transformers, the library is what is reported missing")
    with pytest.raises(ModelMissingError, match=f"embedding.model: no model folder at {model}"):
        build_runtime(config)
    assert not store.exists()
    with build_runtime(config, allow_embedding_mismatch=True) as repairing:  # a repair needs no model
        assert not repairing.embedder.is_loaded
    yaml = tmp_path / "config.yaml"
    yaml.write_text(f"embedding:\n  model: {model}\n  backend: sentence-transformers\n")
    assert main(["search", "plants", "--agent", "a", "--user", "x", "--store", str(store),
                 "--config", str(yaml)]) == 1
    assert capsys.readouterr().err == f"retold search: embedding.model: no model folder at {model}\n"
    # A command that only reads what is stored runs without the model.
    assert main(["dump", "--scope", "user:x", "--store", str(store), "--config", str(yaml)]) == 0
