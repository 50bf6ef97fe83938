"""Shared helpers for benchmark harnesses: percentiles and the JSON + markdown report."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def report_name(base: str, config: Path | None) -> str:
    """``base``, or ``base_int8`` for a run started from ``config.int8.yaml``: another
    config's figures never overwrite the defaults'."""
    if config is None:
        return base
    return f"{base}_" + config.name.removeprefix("config.").removesuffix(".yaml").replace(".", "_")


def pin_threads() -> None:
    """One BLAS/torch thread for steady figures on a shared machine. Call before numpy."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def summarize(samples_ms: Sequence[float]) -> dict[str, float]:
    """Median, p95 and count of a list of millisecond timings."""
    ordered = sorted(samples_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 3), "p95": round(p95, 3), "n": len(ordered)}


def percentile(samples_ms: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.99 for p99), as ``summarize`` ranks p95."""
    ordered = sorted(samples_ms)
    return round(ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))], 3)


def machine() -> dict[str, object]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def write_report(name: str, data: dict[str, object], table: list[list[str]], notes: str = "",
                 directory: Path = RESULTS) -> None:
    """Write ``<name>.json`` and ``<name>.md`` (a short markdown table) into ``directory``,
    ``benchmarks/results/`` unless a smoke run sends them elsewhere."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    header, *rows = table
    lines = [f"# {name} benchmark", "", notes, "" if notes else "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    (directory / f"{name}.md").write_text("\n".join(line for line in lines if line is not None) + "\n")
