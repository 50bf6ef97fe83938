"""The module map in docs/architecture.md, rendered from each module's docstring.

For every package of ``retold/`` and ``workers/`` (and the modules at the repository
root), :func:`render` writes the package's path with the first sentence of its
``__init__`` docstring, then a table of its modules, each with the first sentence of its
own docstring. The sources are read, never imported, so rendering loads no optional
dependency. The map sits between two marker comments in the page; :func:`replace_map`
swaps what is between them and leaves the rest of the page alone.
``tests/unit/test_module_map.py`` fails when the page's map is not :func:`render` of the
tree, so a module added, moved or re-described without regenerating fails there.

Regenerate with ``python -m retold.module_map --write docs/architecture.md``.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

__all__ = ["BEGIN", "END", "first_sentence", "main", "render", "replace_map"]

BEGIN = ("<!-- module map: generated from each module's docstring by"
         " `python -m retold.module_map --write docs/architecture.md`; edit the docstrings, not this -->")
END = "<!-- end of module map -->"
SOURCES = ("retold", "workers")

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # :mod:`x`, :func:`~x` as plain code
# A sentence ends at a full stop before a space, except the one in "e.g." or "i.e.".
_SENTENCE = re.compile(r"(.+?(?<!e\.g)(?<!i\.e)\.)(?:\s|$)")


def first_sentence(docstring: str) -> str:
    """The docstring's first sentence on one line, as Markdown (``x`` read as `x`)."""
    paragraph = " ".join(docstring.split("\n\n", 1)[0].split())
    found = _SENTENCE.match(paragraph)
    sentence = found.group(1) if found else paragraph
    return _ROLE.sub(r"`\1`", sentence).replace("``", "`").replace("|", "\\|")


def render(root: Path) -> str:
    """The module map of the repository at ``root``: one heading and table per package."""
    groups: list[tuple[str, str, list[Path]]] = []
    for source in SOURCES:
        for folder in sorted({p.parent for p in (root / source).rglob("*.py")}):
            init = folder / "__init__.py"
            about = _about(init) if init.exists() else ""
            modules = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
            groups.append((folder.relative_to(root).as_posix() + "/", about, modules))
    groups.append(("the repository root", "", sorted(root.glob("*.py"))))
    parts = []
    for name, about, modules in groups:
        heading = f"**`{name}`**" if name.endswith("/") else f"**{name}**"
        parts.append(f"{heading}: {about}\n" if about else f"{heading}\n")
        if modules:
            rows = "".join(f"| `{m.name}` | {_about(m)} |\n" for m in modules)
            parts.append("| module | what it is for |\n|---|---|\n" + rows)
    return "\n".join(parts)


def replace_map(page: str, rendered: str) -> str:
    """``page`` with what stands between the map's markers replaced by ``rendered``."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n\n" + rendered + "\n" + page[end:]


def _about(path: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    return first_sentence(docstring) if docstring else ""


def main(argv: list[str] | None = None) -> int:
    """``python -m retold.module_map [--root DIR] [--write PAGE]``: print the map, or
    write it between the markers of a page."""
    parser = argparse.ArgumentParser(
        prog="python -m retold.module_map",
        description="Render the module map of docs/architecture.md from the modules' docstrings.")
    parser.add_argument("--root", default=".", help="the repository to read (default: here)")
    parser.add_argument("--write", metavar="PAGE", help="replace the map between the markers of this page")
    args = parser.parse_args(argv)
    rendered = render(Path(args.root))
    if args.write:
        page = Path(args.write)
        page.write_text(replace_map(page.read_text(encoding="utf-8"), rendered), encoding="utf-8")
    else:
        sys.stdout.write(rendered)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
