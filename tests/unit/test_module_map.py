"""The module map in docs/architecture.md is the modules' docstrings rendered by
retold.module_map.

Add, move or re-describe a module, then regenerate:
``python -m retold.module_map --write docs/architecture.md``.
"""

from __future__ import annotations

from pathlib import Path

from retold.module_map import BEGIN, END, first_sentence, main, render, replace_map

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def test_the_architecture_pages_module_map_is_the_rendered_tree() -> None:
    page = DOC.read_text(encoding="utf-8")
    assert page == replace_map(page, render(ROOT)), (
        "the module map in docs/architecture.md is stale: run"
        " python -m retold.module_map --write docs/architecture.md")


def test_every_module_has_a_row_that_says_what_it_is_for() -> None:
    rendered = render(ROOT)
    rows = {line.split(" | ")[0].strip("|` ") + "|" + line.split(" | ")[1]
            for line in rendered.splitlines() if line.startswith("| `")}
    described = {row.split("|")[0] for row in rows if row.split("|")[1].strip(" |")}
    modules = {p.name for source in ("retold", "workers") for p in (ROOT / source).rglob("*.py")
               if p.name != "__init__.py"}
    assert modules - described == set(), "modules without a docstring or a row"


def test_a_first_sentence_reads_as_markdown_on_one_line() -> None:
    docstring = ("``retold ui``: pages over :class:`~retold.runtime.Runtime`, e.g. the records\n"
                 "of one scope. What follows is not shown.\n\nNor is this.")
    assert first_sentence(docstring) == ("`retold ui`: pages over `retold.runtime.Runtime`, e.g. the"
                                         " records of one scope.")
    assert first_sentence("A or B | C") == "A or B \\| C"


def test_writing_replaces_only_what_stands_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "architecture.md"
    page.write_text(f"# Before\n\n{BEGIN}\nan old map\n{END}\n\n## After\n", encoding="utf-8")
    assert main(["--root", str(ROOT), "--write", str(page)]) == 0
    written = page.read_text(encoding="utf-8")
    assert written.startswith(f"# Before\n\n{BEGIN}\n\n**`retold/`**")
    assert written.endswith(f"{END}\n\n## After\n") and "an old map" not in written
