"""``retold demo`` end to end as `make demo` runs it: real model, real Celery worker
subprocesses on the embedded broker, replayed extraction (no API key, no Redis)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def _leftover_workers(marker: str) -> list[str]:
    """Live processes whose command line names ``marker`` (the demo's own directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "celery" in cmdline and marker in environ:
            found.append(f"{proc.name}: {cmdline}")
    return found


@pytest.mark.model
@pytest.mark.slow
def test_demo_tells_the_acme_north_story(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items()
           if key not in ("ANTHROPIC_API_KEY", "RETOLD_CONFIG", "RETOLD_STORE", "RETOLD_BROKER_URL",
                          "RETOLD_REPLAY_EXTRACTION")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    store_dir = tmp_path / "demo-store"
    result = subprocess.run(
        [sys.executable, "-m", "retold.cli", "demo", "--store", str(store_dir / "memory.sqlite")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr[-4000:] + out[-4000:]
    assert f"fresh store in {store_dir.resolve()}" in out
    assert "extractor: replayed recording" in out
    assert "extraction of acme-north-1: extracted (replayed)" in out
    assert "extraction of acme-north-2: extracted (replayed)" in out
    assert "Jordan wants customer emails written in British English." in out.split("== session 2", 1)[1]
    assert "current billing contact: Billing contact for Acme North is Marcus Chen." in out
    assert "[superseded] Billing contact for Acme North is Dana Reyes." in out
    # Asked as of February, the contact then: Dana, with her window marked as the one that held.
    february = out.split("== as of February:", 1)[1].split("== session summaries", 1)[0]
    assert "billing contact on 2026-02-15: Billing contact for Acme North is Dana Reyes." in february
    assert "valid 2026-01-10 to 2026-03-01 (valid at 2026-02-15)" in february
    assert "Marcus Chen" not in february
    # The first session's summary names Dana as the contact: history, never served as current.
    assert "session:acme-north-1 [superseded]: The account manager prepared the Acme North renewal" in out
    assert "session:acme-north-2 [confirmed]: The account manager reported that Dana Reyes left" in out
    seen = out.split("explanation (what the model sees):", 1)[1].split("== with include_history", 1)[0]
    assert "named Dana Reyes as the billing contact" not in seen
    assert "Billing contact for Acme North is Dana Reyes." not in seen
    trail = out.split("== event trail", 1)[1]
    for kind in ("record.created", "record.reinforced", "record.superseded"):
        assert kind in trail
    assert len(re.findall(r"extraction\.run .*replayed", trail)) == 2
    if "extraction: a Celery worker subprocess" in out:
        # One worker serves the whole story.
        assert len(re.findall(r"worker pid \d+ started", out)) == 1
        assert len(re.findall(r"worker pid \d+ exited with code 0", out)) == 1
        assert _leftover_workers(str(store_dir.resolve())) == []
    else:
        assert "extraction ran in-process (worker unavailable)" in out


@pytest.mark.model
def test_demo_falls_back_to_in_process_extraction(tmp_path: Path) -> None:
    from retold.demo import run_demo

    lines: list[str] = []
    result = run_demo(tmp_path, lines.append, use_worker=False, environ={})
    assert "extraction ran in-process (worker disabled)" in lines
    assert result.extraction == "in-process" and result.extractor == "replayed"
    assert result.outcomes == {"acme-north-1": "extracted", "acme-north-2": "extracted"}
    assert result.current == "Billing contact for Acme North is Marcus Chen."
    assert result.superseded == [
        "Billing contact for Acme North is Dana Reyes.",
        "The account manager prepared the Acme North renewal and named Dana Reyes as the billing contact.",
    ]
    assert result.february == "Billing contact for Acme North is Dana Reyes."
    assert len(result.summaries) == 2
    # Session 2 starts with the standing preference session 1 recorded, and nothing else.
    profile = result.profile.splitlines()
    assert len(profile) == 3
    assert profile[1].endswith("] Jordan wants customer emails written in British English.")
    assert "Dana" not in result.profile
    # What the model sees for the question: Marcus first, and no block names Dana as current.
    start = lines.index("explanation (what the model sees):") + 1
    seen = [line.strip() for line in lines[start:lines.index("\n== with include_history")]]
    contents = [line for line in seen if line and not line.startswith(("searched for:", "[", "matched:"))]
    assert contents[0] == "Billing contact for Acme North is Marcus Chen."
    assert not any("Dana Reyes as the billing contact" in c or c.endswith("is Dana Reyes.") for c in contents)
    assert {"record.reinforced", "record.superseded", "extraction.run"} <= set(result.event_kinds)
    assert result.worker_exit_codes == []
