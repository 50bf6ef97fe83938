"""``retold demo`` and ``retold mcp``: the commands that run Retold for someone else to
watch or call."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import Any

from retold.cli.common import EXIT_USAGE, Refused, add_command, cli_config, cli_runtime, print_json
from retold.cli_failure import EXIT_ERROR, one_line
from retold.config.tokens import tokens_for
from retold.errors import RetoldError
from retold.models import Principal
from retold.policy.grants import no_grant_reason, readable_scopes

__all__ = ["host_port", "register"]


def _cmd_demo(args: argparse.Namespace) -> int:
    from retold.clock import Timer
    from retold.demo import run_demo

    timer = Timer()
    store = Path(args.store or ".demo/memory.sqlite").resolve()
    result = run_demo(store.parent, store_name=store.name)
    timer.mark("demo")
    print(f"\ndone in {timer.as_dict()['total'] / 1000:.1f} s; store: {result.store_path}")
    return 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    if args.print_config:
        return _print_client_config(args)
    if args.http:
        if args.agent or args.user or args.project:
            raise Refused("--agent, --user and --project are for stdio; over --http each token in"
                          " mcp.tokens names its principal", EXIT_USAGE)
        host, port = host_port(args.http)
        config = cli_config(args)
        if not tokens_for(config.mcp.tokens, config.tenancy.tenant):
            raise Refused(f"--http needs at least one token of tenant {config.tenancy.tenant} in"
                          " mcp.tokens of --config; anonymous access is never served", EXIT_USAGE)
    elif not (args.agent and args.user):
        raise Refused("stdio needs --agent and --user (or use --http with mcp.tokens)", EXIT_USAGE)
    try:
        from retold import mcp_server
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(("mcp", "uvicorn", "starlette")):
            raise
        raise Refused("the MCP SDK is not installed; pip install 'retold[mcp]'", EXIT_USAGE) from None
    if args.http:
        with cli_runtime(args) as rt:
            mcp_server.serve_http(rt, host, port, on_listening=lambda url: print(
                f"retold mcp: listening on {url} (Ctrl-C stops it)", file=sys.stderr, flush=True))
        return 0
    try:
        rt = cli_runtime(args)
    except (Refused, RetoldError, OSError, sqlite3.Error) as exc:
        # A desktop client that started this process shows only that its pipe closed; a
        # server that answers with the reason shows it where the user looks.
        reason = f"retold mcp: {one_line(exc)}"
        print(reason, file=sys.stderr)
        mcp_server.serve_failure(reason)
        return exc.code if isinstance(exc, Refused) else EXIT_ERROR
    with rt:
        mcp_server.serve_stdio(rt, args.agent, args.user, args.project)
    return 0


def _print_client_config(args: argparse.Namespace) -> int:
    """The block a desktop client's config takes to start this server over stdio: the
    absolute interpreter (a virtualenv's ``retold`` is not on an app's PATH) and the
    absolute store, after checking the store exists and the agent may read the user."""
    if not (args.agent and args.user):
        raise Refused("--print-config needs --agent and --user: the server it starts serves one principal",
                      EXIT_USAGE)
    config = cli_config(args)
    target = config.store.url or str(Path(config.store.path).resolve())
    with cli_runtime(args, models=False) as rt:
        principal = Principal(args.agent, args.user, project_id=args.project)
        lacking = no_grant_reason(rt.store, principal, readable_scopes(rt.store, principal))
    if lacking:
        raise Refused(f"{lacking}; run: retold grant {args.agent} user:{args.user} --read --write"
                      f" --store {target}")
    server_args = ["-m", "retold.cli", "mcp", "--store", target, "--agent", args.agent, "--user", args.user]
    if args.project:
        server_args += ["--project", args.project]
    if args.config:
        server_args += ["--config", str(Path(args.config).resolve())]
    print_json({"mcpServers": {"retold": {"command": sys.executable, "args": server_args,
                                          "env": {"HF_HUB_OFFLINE": "1"}}}})
    return 0


def host_port(text: str, flag: str = "--http") -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 hosts in brackets) as its parts; one usage line otherwise."""
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Refused(f"{flag} expects HOST:PORT, e.g. 127.0.0.1:8765, got {text!r}", EXIT_USAGE)
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
    mcp.add_argument("--print-config", action="store_true",
                     help="print the JSON block a desktop client's config takes to start this server"
                          " (absolute interpreter and store), after checking the store and the grant")
