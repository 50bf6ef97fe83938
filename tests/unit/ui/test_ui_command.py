"""``retold ui`` refuses, in one line and before serving anything, to start where it would
show memory to someone it should not: no token configured, or an address other machines
reach without TLS."""

from __future__ import annotations

from pathlib import Path

import pytest

from retold.cli import main
from retold.cli.common import EXIT_USAGE
from retold.testing import make_world
from retold.ui.access import token_digest


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, Path]:
    world = make_world(tmp_path / "w")
    world.rt.close()
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  model: fake\n  version: fake-1\n  dims: 384\n"
                      f"ui:\n  tokens:\n    - sha256: {token_digest('t')}\n      operator: dana\n")
    return world.rt.store.path, config


def _refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["ui", *args]) == EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_no_token_no_inspector(store: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert "needs at least one token of tenant default in ui.tokens" in _refused(capsys, "--store", store[0])


@pytest.mark.parametrize("listen", ["0.0.0.0:8765", "192.168.1.20:8765", "[::]:8765"])
def test_an_address_others_reach_needs_tls_or_a_flag(store: tuple[str, Path], listen: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(capsys, "--store", store[0], "--config", str(store[1]), "--listen", listen)
    assert "--tls-cert and --tls-key" in line and "--insecure-http" in line


def test_tls_needs_both_files(store: tuple[str, Path], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    assert "go together" in _refused(capsys, "--store", store[0], "--config", str(store[1]),
                                     "--tls-cert", str(cert))
    assert "no file" in _refused(capsys, "--store", store[0], "--config", str(store[1]),
                                 "--tls-cert", str(cert), "--tls-key", str(tmp_path / "missing.pem"))


def test_a_bad_listen_address_is_one_line(store: tuple[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert "--listen expects HOST:PORT" in _refused(capsys, "--store", store[0], "--listen", "8765")
