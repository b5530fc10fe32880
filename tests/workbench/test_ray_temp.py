"""A local Ray under a long temporary folder (a test's, a job's) puts its sockets where they fit."""

import tempfile

from workbench.contracts.ray_temp import SOCKET_ROOM, ray_temp_dir


def test_a_long_temporary_folder_moves_rays_session_to_tmp(monkeypatch, tmp_path):
    long = tmp_path / ("x" * SOCKET_ROOM)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    assert ray_temp_dir() == "/tmp/ray"
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    assert ray_temp_dir() is None
