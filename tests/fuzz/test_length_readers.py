"""The length imports (a file, a PolyTrace directory), fuzzed: a result or a clear error naming the
file, never a traceback. Their every valid input runs the length fit (a fraction of a second),
so they are a module of their own, for a second pytest worker (conftest.py: what is fuzzed)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

READERS = "lengths"  # conftest.py's GROUPS
EXAMPLES = int(os.environ.get("TLT_FUZZ_EXAMPLES", "200"))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_bytes_get_a_result_or_a_clear_error(reader, fuzz, data):
    fuzz.read(reader, data.draw(fuzz.cases(reader), label="case"))
