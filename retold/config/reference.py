"""The configuration reference, docs/configuration.md, rendered from config.yaml's comments.

``config.yaml`` lists every key with its default and a one-line comment. :func:`render`
turns that text into Markdown: a fixed introduction (how a process finds its config and
which environment variables count), then one section per top-level block with a table of
key, default and comment. ``tests/unit/test_config_reference.py`` holds docs/configuration.md
equal to ``render`` of the shipped file, so a key added without regenerating fails there.

The reader is line-based and understands the file's own shape, not YAML at large:

- ``name:`` at column 0 opens a block; its trailing comment is the block's description;
- an indented ``key: value  # comment`` is a row, named by its dotted path
  (``retrieval.gate.answer_at.tool``); an indented ``key:`` with no value opens a
  sub-block, and is a row of its own only when it carries a comment;
- a run of indented comment lines is a note under the block's table: leading prose lines
  become a paragraph, the rest (commented-out YAML) a code block;
- comment lines at column 0 and blank lines are skipped.

Regenerate with ``python -m retold.config.reference --write docs/configuration.md``.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Block", "Row", "main", "parse", "render"]

_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?P<rest>.*)$")
_COMMENT_LINE = re.compile(r"^(?P<indent> *)#(?P<text>.*)$")

INTRO = """\
# Configuration

<!-- Generated from config.yaml by `python -m retold.config.reference --write docs/configuration.md`.
Edit config.yaml's comments (or the introduction in retold/config/reference.py), then regenerate. -->

`config.yaml` lists every key with its default and a one-line comment; this page is made
from that file. A key left out keeps its default, and a process with no file at all runs
on the defaults. `load_config(path=None, overrides=None)` returns the typed, frozen config;
a bad value is refused with one message naming the key.

## How a process finds its config

Every Retold process (an agent's `build_runtime()`, the `retold` command, `celery -A workers
...`) follows one rule:

1. the file named explicitly: `load_config(path)` or `retold COMMAND --config PATH`;
2. else the file the `RETOLD_CONFIG` variable names;
3. else `./config.yaml`, when the working folder has one;
4. else the built-in defaults.

The `RETOLD_STORE` and `RETOLD_BROKER_URL` variables then override whichever file was read
(`RETOLD_STORE` sets `store.path`, or `store.url` when it is a PostgreSQL URL;
`RETOLD_BROKER_URL` sets `queue.broker_url`), and `overrides=` passed in code (and a
command's `--store`) win over all. An empty variable counts as unset. A store named by a
later layer replaces the whole store target: a SQLite path in `RETOLD_STORE` or `--store`
beats a `store.url` from the file. `load_config(path=None, overrides=None)` and
`build_runtime()` with no argument both follow this rule, so an agent given the same file
and variables as the workers publishes where they listen.

```python
from retold import build_runtime, load_config

config = load_config(overrides={"store": {"path": "mem.sqlite"}})  # the rule above, then one key
rt = build_runtime(config)
```

## Environment variables

- `RETOLD_CONFIG`: the config file, when none is named explicitly.
- `RETOLD_STORE`: the store, a SQLite path or a PostgreSQL URL ([postgresql.md](postgresql.md)).
- `RETOLD_BROKER_URL`: the Celery broker ([operations.md](operations.md#workers-beat-and-flower)).
- `ANTHROPIC_API_KEY`, or the variable `hosted.api_key_env` names: the hosted-model key
  ([models.md](models.md#hosted-models)).
- `OPENBLAS_NUM_THREADS=1` (or `OMP_NUM_THREADS=1`): one BLAS thread for agents and
  workers, set before numpy loads ([models.md](models.md#cpu-threads)).
- `XDG_CACHE_HOME`: where the ONNX encoder built from the weights is kept, unless
  `embedding.onnx_cache_dir` says otherwise.
- `HF_HUB_CACHE`, `HF_HOME`: where the equivalence judge's model is looked for.
- `HF_HUB_DISABLE_PROGRESS_BARS=0`, `TRANSFORMERS_VERBOSITY=info`: bring back the model
  libraries' progress bars and load reports, which the CLI and the workers silence.
- `RETOLD_FLOWER_AUTH`: `user:password` for Flower's basic auth.
- `RETOLD_REPLAY_EXTRACTION`: workers extract every session with a recorded output
  (offline and demo only; never in production).
- `RETOLD_BEAT_FAST=1`: a test switch; beat runs `recover` and `expire` every second.
- `RETOLD_SCRIPTED_MODEL=1`: the Deep Agents and CrewAI adapters give their agents a
  scripted stand-in for the chat model, so the framework examples run with no key
  ([integrations.md](integrations.md#langchain-deep-agents)).

`config.int8.yaml` holds the two blocks that switch to the int8 encoder and the gate fitted
for it; every other key keeps its default ([models.md](models.md#the-int8-variant)).

## Keys

One section per block of `config.yaml`; each key is shown with its default.
"""


@dataclass
class Row:
    """One key of the reference: its dotted name, its default as written, its comment."""

    key: str
    default: str
    comment: str


@dataclass
class Block:
    """One top-level block of config.yaml: its rows and the notes written under it."""

    name: str
    description: str
    rows: list[Row] = field(default_factory=list)
    notes: list[list[str]] = field(default_factory=list)


def _split_comment(rest: str) -> tuple[str, str]:
    """Split ``value  # comment`` into its value and comment. A ``#`` starts the comment
    only outside quotes and at the start or after whitespace, as in YAML."""
    quote = ""
    for i, ch in enumerate(rest):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), rest[i + 1:].strip()
    return rest.strip(), ""


def parse(yaml_text: str) -> list[Block]:
    """The blocks of a config file written in config.yaml's shape (see the module
    docstring for the rules), in file order."""
    blocks: list[Block] = []
    path: list[tuple[int, str]] = []  # (indent, key) of the open sub-blocks
    note: list[str] | None = None
    note_indent = 0
    for line in yaml_text.splitlines():
        comment = _COMMENT_LINE.match(line)
        if comment and comment.group("indent") and blocks:
            indent = len(comment.group("indent"))
            if note is None:
                note, note_indent = [], indent
                blocks[-1].notes.append(note)
            note.append(" " * max(0, indent - note_indent) + comment.group("text").removeprefix(" "))
            continue
        note = None
        if not line.strip() or comment:
            continue
        match = _KEY_LINE.match(line)
        if match is None:
            raise ValueError(f"config reference: cannot read line {line!r}")
        indent, key = len(match.group("indent")), match.group("key")
        value, text = _split_comment(match.group("rest"))
        if indent == 0:
            blocks.append(Block(key, text))
            path = []
            continue
        if not blocks:
            raise ValueError(f"config reference: {key!r} is indented outside any block")
        path = [(i, k) for i, k in path if i < indent]
        dotted = ".".join([blocks[-1].name, *(k for _, k in path), key])
        if value:
            blocks[-1].rows.append(Row(dotted, value, text))
        else:
            path.append((indent, key))
            if text:
                blocks[-1].rows.append(Row(dotted, "", text))
    return blocks


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _is_prose(line: str) -> bool:
    """A note line that reads as a sentence rather than commented-out YAML: no leading
    space, and words (not a bare key) before its first colon."""
    if not line or line[0].isspace() or line.startswith("- "):
        return False
    head = line.split(":", 1)[0]
    return " " in head.strip() or ":" not in line


def _render_block(block: Block) -> str:
    """One block's section: heading, description, table, notes."""
    out = [f"### {block.name}", ""]
    if block.description:
        out += [block.description[0].upper() + block.description[1:] + ".", ""]
    out += ["| key | default | what it does |", "|---|---|---|"]
    for row in block.rows:
        default = f"`{_cell(row.default)}`" if row.default else ""
        out.append(f"| `{row.key}` | {default} | {_cell(row.comment)} |")
    for note in block.notes:
        prose = []
        lines = list(note)
        while lines and _is_prose(lines[0]):
            prose.append(lines.pop(0))
        out.append("")
        if prose:
            out += [" ".join(prose), ""]
        if lines:
            out += ["```yaml", *lines, "```"]
    return "\n".join(out)


def render(yaml_text: str) -> str:
    """docs/configuration.md for the given config.yaml text: the introduction, then one
    section per top-level block with a key | default | what it does table."""
    sections = [_render_block(block) for block in parse(yaml_text)]
    return INTRO + "\n" + "\n\n".join(sections) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m retold.config.reference [--config PATH] [--write PATH]``: print the
    reference, or write it to a file."""
    parser = argparse.ArgumentParser(
        prog="python -m retold.config.reference",
        description="Render the configuration reference (docs/configuration.md) from config.yaml.")
    parser.add_argument("--config", default="config.yaml",
                        help="the config file to read (default: config.yaml)")
    parser.add_argument("--write", metavar="PATH", help="write the reference here instead of printing it")
    args = parser.parse_args(argv)
    text = render(Path(args.config).read_text(encoding="utf-8"))
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
