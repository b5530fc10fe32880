"""Every reader but the length imports (test_length_readers.py), fuzzed: a result or a clear error
naming the file, never a traceback (conftest.py says what is fuzzed and how)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

READERS = "others"  # conftest.py's GROUPS
EXAMPLES = int(os.environ.get("TLT_FUZZ_EXAMPLES", "200"))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_bytes_get_a_result_or_a_clear_error(reader, fuzz, data):
    fuzz.read(reader, data.draw(fuzz.cases(reader), label="case"))
