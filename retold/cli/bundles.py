"""``retold bundles list|show|record``: the fitness registry that gates host-issued memory.

A bundle is the hash of everything that decides what memory a turn gets
(:mod:`retold.utility.bundles`). The orchestrator regenerates a reply with recalled
records only under a bundle whose newest recorded result is a pass; ``record`` is how an
evaluation (``benchmarks/utility_bench.py`` writes the components file) says so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from retold.cli.common import Refused, add_command, cli_runtime, print_json

__all__ = ["register"]


def _components(path: str) -> dict[str, Any]:
    try:
        loaded = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Refused(f"no components file {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Refused(f"{path}: not a JSON components file: {exc}") from None
    if not isinstance(loaded, dict) or not loaded:
        raise Refused(f"{path}: the components must be one non-empty JSON object")
    # The evaluation's file may carry its results beside the components.
    return dict(loaded.get("components", loaded))


def _cmd(args: argparse.Namespace) -> int:
    from retold.utility.bundles import bundle_hash

    if args.action == "record":
        if not args.file or args.passed is None or not (args.evidence or "").strip() or not args.by:
            raise Refused("bundles record needs COMPONENTS.json, --passed or --failed, --evidence and --by")
        components = _components(args.file)
        with cli_runtime(args, models=False) as rt:
            result = rt.store.record_bundle_result(bundle_hash(components), components, passed=args.passed,
                                                   evidence=args.evidence.strip(), by=args.by)
            current = bundle_hash(rt.bundle_components())
        verdict = "passed: it may serve regenerated replies" if result.passed else "failed: it runs in shadow"
        print(f"recorded bundle {result.bundle} as {verdict}")
        if result.bundle != current:
            print(f"note: this process's configuration is bundle {current}, not {result.bundle}")
        return 0
    with cli_runtime(args, models=False) as rt:
        components = rt.bundle_components()
        current = bundle_hash(components)
        results = rt.store.bundle_results()
        serving = rt.store.bundle_passed(current)
        enabled = rt.orchestrator is not None
    if args.action == "show":
        print_json({"bundle": current, "components": components})
        return 0
    if args.json:
        print_json({"current": current, "may_serve": serving, "enabled": enabled, "results": results})
        return 0
    state = "may serve regenerated replies" if serving else "runs in shadow (no recorded pass)"
    print(f"current bundle {current}: {state}" + ("" if enabled else
          "; host-issued memory is off (utility.enabled, and a host_only or hybrid trigger mode)"))
    for r in results:
        print(f"{r.at}  {r.bundle}  {'passed' if r.passed else 'failed'}  by {r.by}: {r.evidence}")
    if not results:
        print("no results recorded")
    return 0


def register(commands: Any) -> None:
    """Register ``bundles`` on the ``retold`` parser's subcommands."""
    parser = add_command(
        commands, "bundles", _cmd, "list, show or record evaluated host-memory configurations",
        "The fitness registry. `list` prints this process's bundle (the hash of the planner, judge,"
        " gap limits, retrieval settings and embedding family) and every recorded result; `show`"
        " prints its components as JSON; `record COMPONENTS.json --passed|--failed --evidence E --by B`"
        " keeps one result. Host-issued memory regenerates a reply only under a bundle whose newest"
        " result is a pass; otherwise it runs in shadow and serves the draft.")
    parser.add_argument("action", choices=["list", "show", "record"], help="what to do")
    parser.add_argument("file", nargs="?", help="record: the components JSON (an evaluation writes it)")
    verdict = parser.add_mutually_exclusive_group()
    verdict.add_argument("--passed", dest="passed", action="store_true", default=None,
                         help="record: the evaluation passed")
    verdict.add_argument("--failed", dest="passed", action="store_false", help="record: it failed")
    parser.add_argument("--evidence", help="record: what was measured, e.g. the results file and figures")
    parser.add_argument("--by", help="record: who recorded it")
    parser.add_argument("--json", action="store_true", help="list: one JSON object")
