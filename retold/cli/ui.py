"""``retold ui``: the inspector, a small web app over the store for token holders."""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path
from typing import Any

from retold.cli.common import EXIT_USAGE, Refused, add_command, cli_config, cli_runtime
from retold.cli.serve import host_port
from retold.config.tokens import tokens_for
from retold.quality.golden import GoldenFile

__all__ = ["register"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cmd_ui(args: argparse.Namespace) -> int:
    host, port = host_port(args.listen, "--listen")
    tls = (args.tls_cert, args.tls_key)
    if any(tls) and not all(tls):
        raise Refused("--tls-cert and --tls-key go together", EXIT_USAGE)
    for given in filter(None, tls):
        if not Path(given).is_file():
            raise Refused(f"no file {given}", EXIT_USAGE)
    if not _loopback(host) and not all(tls) and not args.insecure_http:
        raise Refused(f"{host} is reachable from other machines, and the inspector shows memory: give"
                      " --tls-cert and --tls-key, or --insecure-http behind a proxy that adds TLS",
                      EXIT_USAGE)
    config = cli_config(args)
    if not tokens_for(config.ui.tokens, config.tenancy.tenant):
        raise Refused(f"the inspector needs at least one token of tenant {config.tenancy.tenant} in ui.tokens"
                      " of --config; it never shows memory to an anonymous visitor", EXIT_USAGE)
    try:
        import uvicorn

        from retold.ui.app import create_app
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(("starlette", "jinja2", "uvicorn", "multipart")):
            raise
        raise Refused("the inspector is not installed; pip install 'retold[ui]'", EXIT_USAGE) from None
    golden = _golden_set(args.golden, config.tenancy.tenant) if args.golden else None
    with cli_runtime(args) as rt:
        scheme = "https" if all(tls) else "http"
        print(f"retold ui: {scheme}://{host}:{port}/ (Ctrl-C stops it)", flush=True)
        uvicorn.run(create_app(rt, golden_set=golden), host=host, port=port, log_level="warning",
                    ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key)
    return 0


def _golden_set(path: str, tenant: str) -> GoldenFile:
    """The golden set the labelling page changes: it must be one, of the tenant served."""
    golden = GoldenFile(path)
    header = golden.read().header  # a file that is no golden set is refused here, in one line
    if header.tenant != tenant:
        raise Refused(f"{path} holds searches of tenant {header.tenant}; this inspector serves {tenant}",
                      EXIT_USAGE)
    return golden


def register(commands: Any) -> None:
    """Add ``ui``."""
    ui = add_command(commands, "ui", _cmd_ui, "serve the memory inspector in a browser",
                     "Serve the inspector: scopes with their counts, records with filters, each"
                     " record with its evidence, lineage, conflicts and events (forget, restore, pin,"
                     " unpin, confirm), a search with every channel's vote, sessions, the review"
                     " queue and, with --golden, a golden set to label. Only holders of a token"
                     " listed (as its SHA-256) in ui.tokens get in: a principal's token shows what"
                     " that principal's memory tools show, an operator's every scope. Listens on"
                     " loopback unless told otherwise. Needs the ui extra.")
    ui.add_argument("--listen", default="127.0.0.1:8765",
                    help="HOST:PORT to listen on (default 127.0.0.1:8765)")
    ui.add_argument("--tls-cert", help="certificate file (PEM), to serve HTTPS")
    ui.add_argument("--tls-key", help="its private key file (PEM)")
    ui.add_argument("--insecure-http", action="store_true",
                    help="allow plain HTTP on an address other machines reach (behind a TLS proxy)")
    ui.add_argument("--golden", metavar="FILE",
                    help="a golden set (retold golden capture) for operators to label at /golden;"
                    " the page changes this file and no other")
