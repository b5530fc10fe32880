"""A sample of the fuzzed inputs through the command line: exit status 0 or 2, no traceback, and
on 2 an error line and nothing written (conftest.py says what is fuzzed and how)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

READERS = "cli"  # conftest.py's GROUPS
EXAMPLES = max(10, int(os.environ.get("TLT_FUZZ_EXAMPLES", "200")) // 10)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_command_exits_2_without_a_traceback_and_writes_nothing(reader, fuzz, data):
    fuzz.command_line(reader, data.draw(fuzz.cases(reader), label="case"))
