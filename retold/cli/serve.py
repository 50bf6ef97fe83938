"""``retold demo`` and ``retold mcp``: the commands that run Retold for someone else to
watch or call."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from retold.cli.common import EXIT_USAGE, Refused, add_command, cli_config, cli_runtime

__all__ = ["register"]


def _cmd_demo(args: argparse.Namespace) -> int:
    from retold.demo import run_demo
    from retold.util import Timer

    timer = Timer()
    store = Path(args.store or ".demo/memory.sqlite").resolve()
    result = run_demo(store.parent, store_name=store.name)
    timer.mark("demo")
    print(f"\ndone in {timer.as_dict()['total'] / 1000:.1f} s; store: {result.store_path}")
    return 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    if args.http:
        if args.agent or args.user or args.project:
            raise Refused("--agent, --user and --project are for stdio; over --http each token in"
                          " mcp.tokens names its principal", EXIT_USAGE)
        host, port = _host_port(args.http)
        if not cli_config(args).mcp.tokens:
            raise Refused("--http needs at least one token in mcp.tokens of --config; anonymous"
                          " access is never served", EXIT_USAGE)
    elif not (args.agent and args.user):
        raise Refused("stdio needs --agent and --user (or use --http with mcp.tokens)", EXIT_USAGE)
    try:
        from retold import mcp_server
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(("mcp", "uvicorn", "starlette")):
            raise
        raise Refused("the MCP SDK is not installed; pip install 'retold[mcp]'", EXIT_USAGE) from None
    with cli_runtime(args) as rt:
        if args.http:
            mcp_server.serve_http(rt, host, port)
        else:
            mcp_server.serve_stdio(rt, args.agent, args.user, args.project)
    return 0


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Refused(f"--http expects HOST:PORT, e.g. 127.0.0.1:8765, got {text!r}", EXIT_USAGE)
    return host, int(port)


def register(commands: Any) -> None:
    """Add ``demo`` and ``mcp``."""
    add_command(commands, "demo", _cmd_demo, "run the end-to-end demo on a fresh store",
                "Play the two-session Acme North story on a fresh store (default .demo/): an explicit"
                " memory_write, then each session's extraction by a Celery worker subprocess on the"
                " embedded broker (in this process if the workers package is missing), replaying"
                " recorded model output when ANTHROPIC_API_KEY is unset; then print the current billing"
                " contact with its explanation, the superseded record, the session summaries and the"
                " event trail. No API key, Redis or model hub needed.")

    mcp = add_command(commands, "mcp", _cmd_mcp, "serve the memory tools to MCP clients",
                      "Serve the five memory tools over the Model Context Protocol: over stdio for the"
                      " principal given by --agent/--user/--project (one session per server process),"
                      " or over streamable HTTP at http://HOST:PORT/mcp where every request needs a bearer"
                      " token listed (as its SHA-256) in mcp.tokens. Needs the mcp extra.")
    mcp.add_argument("--agent", help="agent id of the principal (stdio)")
    mcp.add_argument("--user", help="user id of the principal (stdio)")
    mcp.add_argument("--project", help="project id of the principal, if any (stdio)")
    mcp.add_argument("--http", metavar="HOST:PORT",
                     help="serve streamable HTTP instead of stdio; principals come from mcp.tokens")
