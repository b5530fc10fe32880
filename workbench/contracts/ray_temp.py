"""Where a local Ray keeps its session files.

Ray puts Unix sockets under its session directory (TEMP/ray/session_<date>_<pid>/sockets/...), and
a socket's path may be at most 107 bytes: under a long temporary folder (a test's or a job's
TMPDIR) `ray.init` fails with OSError. Such a folder is passed over for the system's own /tmp.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

# The session directory and socket name take ~66 bytes of the 107 (measured on Ray 2.x).
SOCKET_ROOM = 40
SHORT_ROOT = Path("/tmp")


def ray_temp_dir() -> str | None:
    """Ray's `_temp_dir` for a local start: None (Ray's own default) where the temporary folder
    leaves room for its sockets, else /tmp/ray."""
    if len(tempfile.gettempdir()) <= SOCKET_ROOM or not SHORT_ROOT.is_dir():
        return None
    return str(SHORT_ROOT / "ray")
