"""Memory packs: a malformed pack is refused in one line naming its key, a tenant's
effective pack merges built-in, default and override with each value's source, the
runtime exposes it, and ``retold pack check|show`` report it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.cli import main
from retold.config.pack import BUILTIN_PACK, effective_pack, load_pack_file
from retold.errors import ConfigError

VALID = """\
default:
  classes:
    episodic: {half_life_days: 14, retrieval_budget_pct: 40}
    semantic: {retrieval_budget_pct: 40}
  governance:
    sensitivity_classes:
      - none
      - {name: pii, decided_by: pattern, pattern: '\\b\\d{3}-\\d{2}-\\d{4}\\b'}
      - {name: phi, decided_by: category}
    redact_before_embedding: [pii]
tenants:
  acme:
    classes:
      episodic: {half_life_days: 7}
      procedural: {promote_after_repeats: 3}
    retrieval: {token_budget: 2000}
    write_policy: {contradiction_action: hold_and_flag}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "packs.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# (pack file text, the dotted key its one-line error must name)
MALFORMED = [
    ("default:\n  clases: {}\n", "default.clases"),
    ("default:\n  classes:\n    semantic: {enabled: yes please}\n", "default.classes.semantic.enabled"),
    ("tenants:\n  acme:\n    classes:\n      episodic: {half_life_days: -3}\n",
     "tenants.acme.classes.episodic.half_life_days"),
    ("default:\n  classes:\n    episodic: {half_life_days: 0}\n", "default.classes.episodic.half_life_days"),
    ("default:\n  classes:\n    raw: {half_life_days: true}\n", "default.classes.raw.half_life_days"),
    ("default:\n  classes:\n    semantic: {retrieval_budget_pct: 101}\n",
     "default.classes.semantic.retrieval_budget_pct"),
    ("default:\n  classes:\n    semantic: {retrieval_budget_pct: -1}\n",
     "default.classes.semantic.retrieval_budget_pct"),
    ("default:\n  classes:\n    semantic: {retrieval_budget_pct: 60}\n"
     "    episodic: {retrieval_budget_pct: 50}\n", "default.classes"),
    ("default:\n  classes:\n    semantic: {retrieval_budget_pct: 60}\n"
     "tenants:\n  acme:\n    classes:\n      raw: {retrieval_budget_pct: 41}\n", "tenants.acme.classes"),
    ("default:\n  classes:\n    procedural: {extraction_confidence_floor: 1.5}\n",
     "default.classes.procedural.extraction_confidence_floor"),
    ("default:\n  classes:\n    raw: {retention_days: 0}\n", "default.classes.raw.retention_days"),
    ("default:\n  classes:\n    raw: {retention_days: 2.5}\n", "default.classes.raw.retention_days"),
    ("default:\n  classes:\n    procedural: {promote_after_repeats: 1}\n",
     "default.classes.procedural.promote_after_repeats"),
    ("default:\n  classes:\n    semantic: {versioned: true}\n", "default.classes.semantic.versioned"),
    ("default:\n  retrieval: {token_budget: 100}\n", "default.retrieval.token_budget"),
    ("default:\n  retrieval: {token_budget: 9000}\n", "default.retrieval.token_budget"),
    ("default:\n  retrieval: {relevance_floor: 2}\n", "default.retrieval.relevance_floor"),
    ("default:\n  write_policy: {conflict_rule: newest_wins}\n", "default.write_policy.conflict_rule"),
    ("default:\n  write_policy: {contradiction_action: ignore}\n",
     "default.write_policy.contradiction_action"),
    ("default:\n  write_policy: {review_sample_rate: 1.1}\n", "default.write_policy.review_sample_rate"),
    ("default:\n  governance: {sensitivity_classes: [pii]}\n", "default.governance.sensitivity_classes"),
    ("default:\n  governance: {sensitivity_classes: none}\n", "default.governance.sensitivity_classes"),
    ("default:\n  governance: {sensitivity_classes: [none, none]}\n",
     "default.governance.sensitivity_classes[1].name"),
    ("default:\n  governance:\n    sensitivity_classes:\n"
     "      [none, {name: pii, decided_by: pattern, pattern: '(['}]\n",
     "default.governance.sensitivity_classes[1].pattern"),
    ("default:\n  governance:\n    sensitivity_classes: [none, {name: pii, decided_by: pattern}]\n",
     "default.governance.sensitivity_classes[1].pattern"),
    ("default:\n  governance:\n    sensitivity_classes: [none, {name: pii, decided_by: regex}]\n",
     "default.governance.sensitivity_classes[1].decided_by"),
    ("default:\n  governance:\n    sensitivity_classes: [none, {name: PII}]\n",
     "default.governance.sensitivity_classes[1].name"),
    ("default:\n  governance: {redact_before_embedding: [phi]}\n",
     "default.governance.redact_before_embedding"),
    ("default:\n  governance:\n    sensitivity_classes: [none, {decided_by: category}]\n",
     "default.governance.sensitivity_classes[1].name"),
    ("default:\n  governance:\n    sensitivity_classes: [none, 3]\n",
     "default.governance.sensitivity_classes[1]"),
    ("default:\n  governance:\n"
     "    sensitivity_classes: [none, {name: phi, decided_by: category, pattern: x}]\n",
     "default.governance.sensitivity_classes[1].pattern"),
    ("default:\n  governance:\n    sensitivity_classes: [{name: none, decided_by: category}]\n",
     "default.governance.sensitivity_classes[0]"),
    ("default:\n  governance: {erasure: shred}\n", "default.governance.erasure"),
    ("default:\n  governance: {audit_retention_days: 0}\n", "default.governance.audit_retention_days"),
    ("tenants:\n  Acme: {}\n", "tenants.Acme"),
    ("tenants:\n  acme: [1, 2]\n", "tenants.acme"),
    ("tenants: [acme]\n", "tenants"),
    ("default: 3\n", "default"),
    ("defaults: {}\n", "defaults"),
    ("- default\n", "packs.yaml"),
    ("default: {classes: [\n", "packs.yaml"),
]


@pytest.mark.parametrize(("text", "key"), MALFORMED, ids=[k + f"#{i}" for i, (_, k) in enumerate(MALFORMED)])
def test_a_malformed_pack_is_refused_in_one_line_naming_its_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_pack_file(path)
    message = str(caught.value)
    assert key in message
    assert "\n" not in message


def test_a_missing_pack_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="packs.yaml: memory pack file not found"):
        load_pack_file(tmp_path / "packs.yaml")


def test_the_error_says_what_the_value_must_be(tmp_path: Path) -> None:
    path = write(tmp_path, "tenants:\n  acme:\n    classes:\n      episodic: {half_life_days: -3}\n")
    with pytest.raises(ConfigError) as caught:
        load_pack_file(path)
    assert str(caught.value).startswith(
        "tenants.acme.classes.episodic.half_life_days: must be a positive number or null, got -3")


def test_a_key_only_procedural_records_have_is_pointed_there(tmp_path: Path) -> None:
    path = write(tmp_path, "default:\n  classes:\n    semantic: {promote_after_repeats: 3}\n")
    with pytest.raises(ConfigError, match=r"promote_after_repeats: unknown key \(only classes.procedural"):
        load_pack_file(path)


def test_a_tenant_override_merges_over_the_default_with_sources(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    acme = effective_pack(path, "acme")
    assert acme.tenant == "acme"
    assert acme.pack.classes.episodic.half_life_days == 7
    assert acme.source("classes.episodic.half_life_days") == "tenant acme"
    assert acme.pack.classes.episodic.retrieval_budget_pct == 40  # a sibling the tenant left alone
    assert acme.source("classes.episodic.retrieval_budget_pct") == "pack default"
    assert acme.pack.classes.procedural.promote_after_repeats == 3
    assert acme.pack.retrieval.token_budget == 2000
    assert acme.pack.write_policy.contradiction_action == "hold_and_flag"
    assert acme.pack.governance.class_names() == ("none", "pii", "phi")
    assert acme.pack.governance.redact_before_embedding == ("pii",)
    assert acme.source("governance.sensitivity_classes") == "pack default"
    assert acme.pack.classes.raw.retention_days == 90
    assert acme.source("classes.raw.retention_days") == "built-in"
    assert acme.pack.governance.erasure == "record_only"


def test_a_tenant_the_file_does_not_name_gets_the_default_pack(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    other = effective_pack(path, "globex")
    assert other.tenant == "globex"
    assert other.pack == load_pack_file(path).default.pack
    assert other.pack.classes.episodic.half_life_days == 14
    assert "tenant" not in " ".join(other.sources().values())


def test_without_a_file_every_tenant_gets_the_built_in_pack() -> None:
    pack = effective_pack(None, "acme")
    assert pack.pack == BUILTIN_PACK
    assert set(pack.sources().values()) == {"built-in"}
    # Today's behaviour: every class on, only episodic records decay, nothing redacted.
    assert all(BUILTIN_PACK.classes.of(c).enabled for c in ("semantic", "episodic", "procedural", "raw"))
    assert BUILTIN_PACK.classes.episodic.half_life_days == 30
    assert BUILTIN_PACK.classes.semantic.half_life_days is None
    assert BUILTIN_PACK.governance.redact_before_embedding == ()


def test_an_empty_pack_file_is_the_built_in_pack(tmp_path: Path) -> None:
    assert effective_pack(write(tmp_path, "# nothing yet\n"), "acme").pack == BUILTIN_PACK


def test_the_runtime_exposes_its_tenants_pack_and_refuses_a_broken_one(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    store = {"path": str(tmp_path / "memory.sqlite")}
    config = load_config(overrides={"store": store, "embedding": {"model": "fake"},
                                    "tenancy": {"pack": str(path)}})
    with build_runtime(config) as rt:
        assert rt.pack.tenant == "default"
        assert rt.pack.pack.classes.episodic.half_life_days == 14
    path.write_text("default:\n  classes:\n    episodic: {half_life_days: -1}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="default.classes.episodic.half_life_days"):
        build_runtime(config)


# -- the command line ----------------------------------------------------------------------------


@pytest.fixture
def quiet_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with no config file and no RETOLD_* variables."""
    for name in ("RETOLD_CONFIG", "RETOLD_TENANT", "RETOLD_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_pack_check_counts_tenant_overrides(quiet_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(quiet_env, VALID)
    assert main(["pack", "check", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "ok: 1 tenant override"


def test_pack_check_refuses_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, "tenants:\n  acme:\n    classes:\n      episodic: {half_life_days: -3}\n")
    result = subprocess.run(
        [sys.executable, "-m", "retold.cli", "pack", "check", str(path)], capture_output=True, text=True,
        timeout=60, cwd=tmp_path, env={k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")},
    )
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("retold pack: tenants.acme.classes.episodic.half_life_days: ")
    assert "Traceback" not in result.stderr


def test_pack_show_prints_each_value_with_its_source(quiet_env: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = write(quiet_env, VALID)
    assert main(["pack", "show", "--pack", str(path), "--tenant", "acme"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"tenant acme, pack file {path}"
    table = {line.split()[0]: " ".join(line.split()[1:]) for line in lines[1:]}
    assert table["classes.episodic.half_life_days"] == "tenant acme 7"
    assert table["classes.episodic.retrieval_budget_pct"] == "pack default 40"
    assert table["governance.erasure"] == "built-in record_only"


def test_pack_show_json_follows_the_config(quiet_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(quiet_env, VALID)
    config = quiet_env / "config.yaml"
    config.write_text(f"tenancy:\n  tenant: acme\n  pack: {path.name}\n", encoding="utf-8")
    assert main(["pack", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["tenant"] == "acme"
    assert shown["pack"]["retrieval"]["token_budget"] == 2000
    assert shown["sources"]["retrieval.token_budget"] == "tenant acme"
    assert shown["sources"]["write_policy.review_sample_rate"] == "built-in"
    # --tenant wins over the config's tenant.
    assert main(["pack", "show", "--json", "--tenant", "globex"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["tenant"] == "globex" and other["pack"]["retrieval"]["token_budget"] is None


def test_pack_show_without_a_file_shows_the_built_in_pack(quiet_env: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pack", "show"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tenant default, pack file none (built-in pack)")
    assert "pack default" not in out


def test_pack_show_refuses_a_bad_tenant_name(quiet_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pack", "show", "--tenant", "Not A Name"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "tenant" in err
