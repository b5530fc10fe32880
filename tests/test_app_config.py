"""The shipped Streamlit configuration keeps the app to the person who started it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_app_listens_on_loopback_only_and_sends_no_usage_statistics():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] in {"127.0.0.1", "localhost", "::1"}
    assert config["browser"]["gatherUsageStats"] is False


def test_streamlit_reads_the_shipped_configuration():
    # Streamlit reads .streamlit/config.toml from the directory it starts in (make app runs from the
    # root).
    out = subprocess.run([sys.executable, "-m", "streamlit", "config", "show"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert 'address = "127.0.0.1"' in out and "gatherUsageStats = false" in out
