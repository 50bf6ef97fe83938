"""read_config: defaults, YAML file, overrides, and validation errors that name the key."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import yaml

from retold.config import (
    Config,
    FusionConfig,
    config_to_dict,
    read_config,
)
from retold.errors import ConfigError

REPO_CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _error(overrides: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        read_config(overrides=overrides)
    return str(info.value)


# --- defaults ---------------------------------------------------------------------------


def test_defaults_follow_the_lld_and_design() -> None:
    cfg = read_config()
    assert cfg == Config()
    assert cfg.store.path == "./memory.sqlite"
    assert cfg.store.busy_timeout_seconds == 30
    # The default embedder is MiniLM (384-d), not bge-m3.
    assert cfg.embedding.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert cfg.embedding.dims == 384
    assert cfg.embedding.version == "1"
    assert cfg.embedding.torch_threads is None
    assert cfg.reranker.enabled is False and cfg.reranker.floor is None
    assert cfg.retrieval.trigger.mode == "tool_only"
    assert cfg.retrieval.fusion == FusionConfig(dense=1.0, lexical=0.7, entity=0.3, link=1.0, zero_rank=100)
    assert cfg.retrieval.gate.calibrated_for == cfg.embedding.model
    assert cfg.ingestion.equivalence.entail_floor == 0.70
    assert cfg.ingestion.attribute_alias_cosine == 0.75
    assert cfg.policy.source_rank.user_statement == 4
    assert cfg.policy.source_rank.agent_inference == 1
    assert cfg.sessions.retain_days == 90
    assert cfg.queue.broker_url is None
    assert cfg.queue.extraction_queue == "extraction"


def test_host_issued_searches_answer_less_readily_than_tool_searches() -> None:
    # A search nobody asked for needs a higher score to answer and reads less far down its
    # list than one the model asked for (benchmarks/results/gate_fit.md).
    gate = Config().retrieval.gate
    assert gate.answer_at.host > gate.answer_at.tool
    assert gate.tail_fraction.host >= gate.tail_fraction.tool
    # An unknown name counts against answering; closeness and a lead count for it.
    assert gate.weights.unknown_name < 0 < gate.weights.beyond_names
    assert gate.weights.lead > 0 and gate.weights.asked_coverage > 0


def test_repo_config_yaml_loads_to_exactly_the_defaults() -> None:
    assert read_config(REPO_CONFIG) == read_config()


def test_repo_config_yaml_lists_every_key() -> None:
    raw = yaml.safe_load(REPO_CONFIG.read_text(encoding="utf-8"))
    assert raw == config_to_dict(Config())


def test_empty_yaml_file_means_defaults(tmp_path: Path) -> None:
    assert read_config(_write(tmp_path, "# nothing set\n")) == Config()


def test_yaml_block_with_all_keys_commented_out_keeps_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path, "retrieval:\n  # default_k: 10\n")
    assert read_config(path).retrieval == Config().retrieval


# --- layering ---------------------------------------------------------------------------


def test_overrides_deep_merge_and_keep_sibling_defaults() -> None:
    cfg = read_config(overrides={"retrieval": {"gate": {"answer_at": {"tool": 0.3}}}})
    assert cfg.retrieval.gate.answer_at.tool == 0.3
    assert cfg.retrieval.gate.answer_at.host == Config().retrieval.gate.answer_at.host
    assert cfg.retrieval.gate.weights == Config().retrieval.gate.weights
    assert cfg.retrieval.default_k == 8


def test_file_then_overrides(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "store:\n  path: from-file.sqlite\n  busy_timeout_seconds: 5\n"
        "retrieval:\n  default_k: 3\n"
        "activation:\n  promotable_categories: [instruction, diet]\n",
    )
    cfg = read_config(path, overrides={"store": {"path": "override.sqlite"}})
    assert cfg.store.path == "override.sqlite"  # overrides win over the file
    assert cfg.store.busy_timeout_seconds == 5.0  # file wins over defaults
    assert cfg.retrieval.default_k == 3
    # YAML lists become tuples so the config stays frozen and hashable.
    assert cfg.activation.promotable_categories == ("instruction", "diet")


def test_int_is_accepted_for_a_float_and_stored_as_float() -> None:
    cfg = read_config(overrides={"retrieval": {"freshness": {"floor": 1}}})
    assert cfg.retrieval.freshness.floor == 1.0
    assert isinstance(cfg.retrieval.freshness.floor, float)


def test_replace_returns_a_revalidated_copy() -> None:
    cfg = read_config()
    changed = cfg.replace({"embedding": {"model": "fake", "dims": 8}})
    assert (changed.embedding.model, changed.embedding.dims) == ("fake", 8)
    assert cfg.embedding.model == "sentence-transformers/all-MiniLM-L6-v2"
    with pytest.raises(ConfigError, match=r"embedding\.dims"):
        cfg.replace({"embedding": {"dims": 0}})


def test_config_to_dict_round_trips_through_overrides() -> None:
    cfg = read_config(overrides={"reranker": {"enabled": True, "floor": 0.2}})
    as_dict = config_to_dict(cfg)
    assert as_dict["reranker"] == {
        **config_to_dict(Config().reranker),
        "enabled": True,
        "floor": 0.2,
    }
    assert read_config(overrides=as_dict) == cfg


def test_config_is_frozen() -> None:
    cfg = read_config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.store.path = "elsewhere.sqlite"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.retrieval = cfg.retrieval  # type: ignore[misc]


# --- validation: every message names the dotted key -------------------------------------


def test_unknown_top_level_key() -> None:
    message = _error({"retrieve": {}})
    assert message.startswith("retrieve: unknown key")
    assert "'retrieval'" in message  # near-miss suggestion


def test_unknown_nested_key() -> None:
    message = _error({"retrieval": {"gate": {"weights": {"closeness": 0.5}}}})
    assert "retrieval.gate.weights.closeness: unknown key" in message


def test_unknown_key_in_yaml_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "ingestion:\n  evidence:\n    min_chars: 10\n")
    with pytest.raises(ConfigError, match=r"ingestion\.evidence\.min_chars: unknown key"):
        read_config(path)


def test_bool_is_not_an_int() -> None:
    message = _error({"embedding": {"dims": True}})
    assert message.startswith("embedding.dims: expected an integer")


def test_str_is_not_a_float() -> None:
    message = _error({"retrieval": {"dedup_cosine": "0.9"}})
    assert message.startswith("retrieval.dedup_cosine: expected a number")


def test_float_is_not_an_int() -> None:
    assert _error({"retrieval": {"default_k": 6.5}}).startswith("retrieval.default_k: expected an integer")


def test_number_is_not_a_string(tmp_path: Path) -> None:
    # An unquoted `version: 1` parses as an int; the message tells the user to quote it.
    path = _write(tmp_path, "embedding:\n  version: 1\n")
    with pytest.raises(ConfigError, match=r"embedding\.version: expected a string.*quote"):
        read_config(path)


def test_block_given_as_a_scalar() -> None:
    message = _error({"retrieval": {"gate": 0.5}})
    assert message.startswith("retrieval.gate: expected a mapping")


def test_threshold_out_of_range() -> None:
    message = _error({"retrieval": {"gate": {"answer_at": {"tool": 1.5}}}})
    assert message == "retrieval.gate.answer_at.tool: must be between 0 and 1, got 1.5"


def test_a_fitted_weight_may_be_negative_and_a_fusion_weight_may_be_zero() -> None:
    cfg = read_config(overrides={"retrieval": {"gate": {"weights": {"lead": -1.5}, "bias": -3},
                                               "fusion": {"entity": 0}}})
    assert (cfg.retrieval.gate.weights.lead, cfg.retrieval.gate.bias) == (-1.5, -3.0)
    assert cfg.retrieval.fusion.entity == 0.0
    assert _error({"retrieval": {"fusion": {"lexical": -0.1}}}).startswith(
        "retrieval.fusion.lexical: must be at least 0")


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"embedding": {"dims": 0}}, "embedding.dims"),
        ({"retrieval": {"default_k": -1}}, "retrieval.default_k"),
        ({"reranker": {"timeout_ms": 0}}, "reranker.timeout_ms"),
        ({"store": {"busy_timeout_seconds": -1}}, "store.busy_timeout_seconds"),
        ({"policy": {"source_rank": {"system": -1}}}, "policy.source_rank.system"),
        (
            {"retrieval": {"freshness": {"episodic_half_life_days": 0}}},
            "retrieval.freshness.episodic_half_life_days",
        ),
        ({"ingestion": {"attribute_alias_cosine": -0.1}}, "ingestion.attribute_alias_cosine"),
        ({"store": {"busy_timeout_seconds": float("inf")}}, "store.busy_timeout_seconds"),
        ({"embedding": {"query_cache_entries": -1}}, "embedding.query_cache_entries"),
    ],
)
def test_out_of_range_values(overrides: dict[str, object], key: str) -> None:
    assert _error(overrides).startswith(f"{key}: must be")


@pytest.mark.parametrize(("overrides", "message"), [
    ({"tools": {"max_queries": 4}}, "tools.max_queries: must be between 1 and 3, got 4"),
    ({"tools": {"max_query_chars": 0}}, "tools.max_query_chars: must be between 1 and 100000, got 0"),
    ({"tools": {"max_tags": 101}}, "tools.max_tags: must be between 1 and 100, got 101"),
    ({"ingestion": {"extraction_max_attempts": 21}},
     "ingestion.extraction_max_attempts: must be between 1 and 20, got 21"),
])
def test_tool_limits_stay_within_their_ranges(overrides: dict[str, object], message: str) -> None:
    assert _error(overrides) == message


def test_zero_is_allowed_where_it_means_something() -> None:
    cfg = read_config(
        overrides={
            "store": {"busy_timeout_seconds": 0},
            "policy": {"source_rank": {"agent_inference": 0}},
            "retrieval": {"trigger": {"host_min_query_chars": 0}},
            "ingestion": {"evidence": {"min_characters": 0, "min_words": 0}},
            "embedding": {"query_cache_entries": 0},
        }
    )
    assert cfg.store.busy_timeout_seconds == 0.0
    assert cfg.retrieval.trigger.host_min_query_chars == 0
    assert cfg.embedding.query_cache_entries == 0


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"embedding": {"device": "gpu"}}, "embedding.device"),
        ({"reranker": {"mode": "cross_encoder"}}, "reranker.mode"),
        ({"reranker": {"on_failure": "ignore"}}, "reranker.on_failure"),
        ({"retrieval": {"trigger": {"mode": "always"}}}, "retrieval.trigger.mode"),
    ],
)
def test_bad_literal(overrides: dict[str, object], key: str) -> None:
    message = _error(overrides)
    assert message.startswith(f"{key}: must be one of")


def test_reranker_enabled_without_floor_is_rejected() -> None:
    message = _error({"reranker": {"enabled": True}})
    assert message.startswith("reranker.floor:")
    assert "reranker.enabled" in message


def test_a_lease_must_be_shorter_than_the_claim_timeout() -> None:
    message = _error({"ingestion": {"extraction_lease_seconds": 1800}})
    assert message.startswith("ingestion.extraction_lease_seconds: must be shorter than")


def test_reranker_enabled_with_floor_is_accepted() -> None:
    cfg = read_config(overrides={"reranker": {"enabled": True, "floor": 0.3}})
    assert cfg.reranker.enabled is True
    assert cfg.reranker.floor == 0.3


def test_all_problems_are_reported_in_one_error() -> None:
    message = _error({"embedding": {"dims": "wide", "device": "tpu"}, "sessions": {"days": 1}})
    assert "embedding.dims:" in message
    assert "embedding.device:" in message
    assert "sessions.days: unknown key" in message


# --- files ------------------------------------------------------------------------------


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="not found") as info:
        read_config(missing)
    assert str(missing) in str(info.value)


def test_invalid_yaml_names_the_path(tmp_path: Path) -> None:
    path = _write(tmp_path, "store:\n  path: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML") as info:
        read_config(path)
    assert str(path) in str(info.value)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = _write(tmp_path, "- store\n- embedding\n")
    with pytest.raises(ConfigError) as info:
        read_config(str(path))
    assert str(path) in str(info.value)


def test_the_old_name_of_host_issued_searches_still_loads_with_a_deprecation_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("retrieval:\n  trigger:\n    mode: auto\n    auto_k: 2\n"
                    "  gate:\n    answer_at:\n      auto: 0.9\n", "utf-8")
    with caplog.at_level(logging.WARNING, logger="retold.config.schema"):
        cfg = read_config(path)
    assert cfg.retrieval.trigger.mode == "host_only"
    assert cfg.retrieval.trigger.host_k == 2
    assert cfg.retrieval.gate.answer_at.host == 0.9
    assert sorted(r.getMessage() for r in caplog.records) == [
        "config: retrieval.gate.answer_at.auto is deprecated: use retrieval.gate.answer_at.host",
        "config: retrieval.trigger.auto_k is deprecated: use retrieval.trigger.host_k",
        "config: retrieval.trigger.mode: auto is deprecated: use host_only",
    ]


def test_inspector_tokens_name_a_principal_or_an_operator_never_both() -> None:
    digest = "a" * 64
    ok = read_config(overrides={"ui": {"tokens": [{"sha256": digest, "operator": "dana"},
                                                  {"sha256": "b" * 64, "agent_id": "a1", "user_id": "u1"}]}})
    assert [t.operator for t in ok.ui.tokens] == ["dana", None]
    message = _error({"ui": {"tokens": [{"sha256": digest, "operator": "dana", "user_id": "u1"},
                                        {"sha256": digest, "agent_id": "a1", "user_id": "u1"},
                                        {"sha256": "the-token-itself", "agent_id": "", "user_id": "u1"}]}})
    assert "ui.tokens[0]: an operator token names no agent_id" in message
    assert "ui.tokens[1].sha256: the same token as ui.tokens[0]" in message
    assert "ui.tokens[2].sha256: must be the 64-character lowercase hex SHA-256" in message
    assert "ui.tokens[2].agent_id: must be a non-empty string" in message


def test_approximate_index_keys_are_checked_by_name() -> None:
    assert read_config().index.approximate.min_rows == 20000
    assert "index.approximate.min_rows: must be at least 1" in _error(
        {"index": {"approximate": {"min_rows": 0}}})
    assert "index.approximate.rebuild_fraction: must be between 0 and 1" in _error(
        {"index": {"approximate": {"rebuild_fraction": 1.5}}})
    assert "index.approximate.ef_serch: unknown key (did you mean 'ef_search'?)" in _error(
        {"index": {"approximate": {"ef_serch": 64}}})
