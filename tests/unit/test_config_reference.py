"""docs/configuration.md is config.yaml's comments rendered by retold.config.reference.

Change a key or its comment in config.yaml, then regenerate:
``python -m retold.config.reference --write docs/configuration.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from retold.config.reference import main, parse, render

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config.yaml"
DOC = ROOT / "docs" / "configuration.md"


def test_the_configuration_page_is_the_rendered_config_file() -> None:
    expected = render(CONFIG.read_text(encoding="utf-8"))
    assert DOC.read_text(encoding="utf-8") == expected, (
        "docs/configuration.md is stale: run python -m retold.config.reference --write docs/configuration.md")


def test_every_top_level_block_has_a_section() -> None:
    doc = DOC.read_text(encoding="utf-8")
    blocks = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    for name in blocks:
        assert f"\n### {name}\n" in doc, name


def test_every_key_of_the_loaded_file_has_a_row() -> None:
    """Every leaf of the parsed YAML is a row, by its dotted name."""
    def leaves(prefix: str, value: object) -> list[str]:
        if isinstance(value, dict):
            return [leaf for k, v in value.items() for leaf in leaves(f"{prefix}.{k}", v)]
        return [prefix]

    data = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    expected = {leaf for name, block in data.items() for leaf in leaves(name, block)}
    blocks = parse(CONFIG.read_text(encoding="utf-8"))
    rows = {row.key for block in blocks for row in block.rows if row.default}
    assert rows == expected


def test_rows_keep_dotted_paths_defaults_and_comments() -> None:
    text = (
        "# file header, skipped\n"
        "outer:                 # what the block is for\n"
        "  plain: 3             # a count\n"
        '  quoted: "a # b"      # the hash inside quotes is no comment\n'
        "  group:               # a group\n"
        "    choice: x          # x | y\n"
        "    bare:\n"
        "      deep: null\n"
        "  after: [a, b]\n"
        "  # A note about the block:\n"
        "  # example:\n"
        "  #   - key: 1\n"
        "second:\n"
        "  k: v\n"
    )
    blocks = parse(text)
    assert [b.name for b in blocks] == ["outer", "second"]
    assert blocks[0].description == "what the block is for"
    assert [(r.key, r.default, r.comment) for r in blocks[0].rows] == [
        ("outer.plain", "3", "a count"),
        ("outer.quoted", '"a # b"', "the hash inside quotes is no comment"),
        ("outer.group", "", "a group"),
        ("outer.group.choice", "x", "x | y"),
        ("outer.group.bare.deep", "null", ""),
        ("outer.after", "[a, b]", ""),
    ]
    assert blocks[0].notes == [["A note about the block:", "example:", "  - key: 1"]]
    page = render(text)
    assert "| `outer.group.choice` | `x` | x \\| y |" in page
    assert "A note about the block:\n\n```yaml\nexample:\n  - key: 1\n```" in page
    assert page.endswith("| `second.k` | `v` |  |\n")


def test_a_line_it_cannot_read_is_an_error() -> None:
    with pytest.raises(ValueError, match="cannot read"):
        parse("block:\n  - item\n")


def test_main_prints_or_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "c.yaml"
    source.write_text("store:\n  path: x.sqlite  # the file\n", encoding="utf-8")
    assert main(["--config", str(source)]) == 0
    printed = capsys.readouterr().out
    assert printed == render(source.read_text(encoding="utf-8"))
    target = tmp_path / "out.md"
    assert main(["--config", str(source), "--write", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == printed
