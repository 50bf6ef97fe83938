"""Search-benchmark mode "cold": a fresh process builds the runtime and answers one search.

Each run starts a new interpreter on a store of real MiniLM vectors with the default
config (the packaged model on ONNX Runtime, its file already exported), imports retold,
calls ``build_runtime`` and then ``memory_search`` once. Two clocks:

- from process start: the parent notes the wall time just before it spawns the child,
  and the child subtracts it from the wall time when the search returned, so interpreter
  start and every import count, and the child's exit does not;
- from ``import retold``: the child's own clock, started on its first line.

The child reports whether ``torch`` (or sentence-transformers) was imported by the time
it closed the runtime; a run that imported either fails the mode.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import summarize
from benchmarks.search_data import AGENT, USER, bench_config, config_file, populate
from retold import build_runtime
from retold.index.onnx_export import ensure_exported
from retold.ingest.equivalence import ExactJudge

QUERY = "which tool does Priya use for canary deploys?"

CHILD = f"""\
import time; t0 = time.perf_counter()
import json, sys
import retold
from retold import Principal
imported = time.perf_counter()
rt = retold.build_runtime(retold.load_config(sys.argv[3] or None, overrides=json.loads(sys.argv[1])))
built = time.perf_counter()
res = rt.tools.call("memory_search", Principal("{AGENT}", "{USER}", "cold", None),
                    {{"queries": [{QUERY!r}]}})
done = time.perf_counter(); done_wall = time.time()
rt.close()
print(json.dumps({{
    "backend": type(rt.embedder).__name__, "results": len(res.get("results", [])),
    "error": res.get("error"), "import_ms": (imported - t0) * 1000,
    "build_ms": (built - imported) * 1000, "first_search_ms": (done - built) * 1000,
    "from_import_ms": (done - t0) * 1000,
    "from_process_start_ms": (done_wall - float(sys.argv[2])) * 1000,
    "torch_imported": "torch" in sys.modules,
    "sentence_transformers_imported": "sentence_transformers" in sys.modules,
}}))
"""

KEYS = ("import_ms", "build_ms", "first_search_ms", "from_import_ms", "from_process_start_ms")


def run_cold(tmp: Path, records: list[dict[str, Any]], vectors: np.ndarray, runs: int) -> dict[str, Any]:
    """``runs`` fresh processes on a store of ``len(records)`` records; medians of each clock."""
    path = tmp / f"cold_{len(records)}.sqlite"
    config = bench_config(path)
    ensure_exported(config.embedding)  # so no timed child spends seconds building the file
    with build_runtime(config, judge=ExactJudge()) as rt:
        populate(rt, records, vectors[: len(records)])
    overrides = json.dumps({"store": {"path": str(path)}})
    samples: list[dict[str, Any]] = []
    for _ in range(runs):
        spawned = time.time()
        done = subprocess.run([sys.executable, "-c", CHILD, overrides, repr(spawned),
                               str(config_file() or "")],
                              capture_output=True, text=True, timeout=300, check=True)
        samples.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert all(s["error"] is None for s in samples), samples
    imported = sorted({key for s in samples for key in ("torch", "sentence_transformers")
                       if s[f"{key}_imported"]})
    assert not imported, f"a cold process imported {', '.join(imported)}"
    return {
        "records": len(records), "runs": runs, "backend": samples[0]["backend"],
        "results": [s["results"] for s in samples], "torch_imported": False,
        **{key: summarize([s[key] for s in samples]) for key in KEYS},
    }
