"""docs/architecture.md names only modules, files and code that exist.

The rules, applied to every span between single backticks in the page:

1. A trailing argument list is dropped: `VectorIndex.refresh(store, n)` is
   `VectorIndex.refresh`.
2. A span ending in a file suffix (``.py``, ``.sql``, ``.md``, ``.json``) is a path. It must
   exist relative to the repository root, or to one of the packages of ``retold/`` or
   ``workers/`` (the tables name ``records.py`` under their ``retold/store/`` heading).
3. A span starting with ``retold.`` is a dotted module path: its longest prefix that is a
   module must exist, and the part after it must be a name defined in that module. A
   Celery task name (``retold.extract_session``, a string ``workers/tasks.py`` registers)
   counts as well.
4. Any other span made of identifiers joined by dots is split at the dots, and every part
   that looks like code must be a name found in the package's source: a ``CamelCase``
   part (an upper-case first letter and a lower-case letter somewhere) or a part holding an
   underscore (``snake_case``, ``CONSTANT_CASE``). Plain lower-case words (``store``,
   ``fuse``) read as English and are not checked. The names found are every definition,
   assignment target, attribute assigned on ``self``, parameter and import in
   ``retold/``, ``workers/`` and ``beat_schedule.py``, and every identifier inside a
   string the code uses (tool names, error codes, event kinds, SQL tables and columns),
   read from the source without importing it. ``ALLOWED`` lists the few code-looking words
   the page uses that are not Retold's names.

The store's mixin list (the line starting ``Store mixins:``) must equal the bases of
:class:`retold.store.store.Store`, in order.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SOURCES = [ROOT / "retold", ROOT / "workers", ROOT / "beat_schedule.py"]
PATH_SUFFIXES = (".py", ".sql", ".md", ".json")

# Code-looking words in the page that are not names in Retold's source (none today; add a
# word here only when it is not code, e.g. a product name written in backticks).
ALLOWED: frozenset[str] = frozenset()

_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _python_files() -> list[Path]:
    files: list[Path] = []
    for source in SOURCES:
        files += [source] if source.is_file() else sorted(source.rglob("*.py"))
    return files


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (not strings the code uses)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _names_in(tree: ast.AST) -> set[str]:
    """Every name a module defines, assigns, takes as a parameter or imports, and every
    identifier inside a string it uses."""
    names: set[str] = set()
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(node.module.split("."))
        elif isinstance(node, ast.alias):
            names.update((node.asname or node.name).split("."))
            names.update(node.name.split("."))
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            names.update(_WORD.findall(node.value))
    return names


@cache
def _package_strings() -> frozenset[str]:
    """Every whole string constant in the package's code (task names, event kinds)."""
    found: set[str] = set()
    for path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found |= {node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    return frozenset(found)


@cache
def _package_names() -> frozenset[str]:
    names: set[str] = set()
    for path in _python_files():
        names.add(path.stem)
        names |= _names_in(ast.parse(path.read_text(encoding="utf-8")))
    for sql in (ROOT / "retold").rglob("*.sql"):
        names.update(_WORD.findall(sql.read_text(encoding="utf-8")))
    return frozenset(names)


def _module_defines(module: str) -> set[str]:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    return _names_in(ast.parse(Path(spec.origin).read_text(encoding="utf-8")))


def _is_module(name: str) -> bool:
    """Whether ``name`` is an importable module; ``a.b.f``, a function of module ``a.b``,
    is not (``find_spec`` raises for it rather than answering None)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _looks_like_code(part: str) -> bool:
    camel = part[0].isupper() and any(c.islower() for c in part)
    return camel or "_" in part.strip("_")


def _spans() -> list[str]:
    """Each backticked span of the page, with a trailing argument list dropped."""
    return [re.sub(r"\(.*\)$", "", span.strip()) for span in _SPAN.findall(DOC.read_text(encoding="utf-8"))]


def test_every_file_path_the_page_names_exists() -> None:
    missing = []
    packages = [ROOT / "retold", ROOT / "workers"]
    bases = [ROOT, *packages, *(p for package in packages for p in package.rglob("*") if p.is_dir())]
    for path in _spans():
        if not path.endswith(PATH_SUFFIXES) or " " in path:
            continue
        if not any((base / path).exists() for base in bases):
            missing.append(path)
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_dotted_module_path_exists() -> None:
    missing = []
    for path in _spans():
        if not path.startswith("retold.") or not _DOTTED.fullmatch(path) or path in _package_strings():
            continue
        parts = path.split(".")
        module = next((".".join(parts[:n]) for n in range(len(parts), 0, -1)
                       if _is_module(".".join(parts[:n]))), None)
        if module is None:
            missing.append(path)
            continue
        rest = parts[len(module.split(".")):]
        if rest and rest[0] not in _module_defines(module):
            missing.append(path)
    assert not missing, f"docs/architecture.md names modules or names that do not exist: {missing}"


def test_every_code_name_the_page_uses_is_in_the_package() -> None:
    known = _package_names()
    missing = set()
    for name in _spans():
        if name.endswith(PATH_SUFFIXES) or name.startswith("retold.") or not _DOTTED.fullmatch(name):
            continue
        missing |= {part for part in name.split(".")
                    if _looks_like_code(part) and part not in known and part not in ALLOWED}
    assert not missing, f"docs/architecture.md names code that is not in the package: {sorted(missing)}"


def test_the_mixin_list_is_the_bases_of_store() -> None:
    from retold.store.store import Store

    lines = [line for line in DOC.read_text(encoding="utf-8").splitlines()
             if line.strip().startswith("Store mixins:")]
    assert len(lines) == 1, "docs/architecture.md needs exactly one 'Store mixins:' line"
    listed = _SPAN.findall(lines[0])
    assert listed == [base.__name__ for base in Store.__bases__]


def test_the_rules_catch_a_renamed_name() -> None:
    """The checks are not vacuous: a made-up name is not in the package."""
    known = _package_names()
    assert "write_record" in known and "VectorIndex" in known and "memory_search" in known
    assert "write_recrod" not in known and "VectorIndx" not in known
