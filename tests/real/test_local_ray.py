"""`tlt train` and `tlt bench real` start a Ray of their own when no `--address` is given, even
where another Ray already runs on the machine (a `ray start` head, another run): a bare
ray.init() would join that one and refuse the slots they ask for."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import ray
    from ray.cluster_utils import Cluster

    from real.run.pool import start_local_ray

    other = Cluster(initialize_head=True,
                    head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        start_local_ray(3)
        cpus = ray.cluster_resources().get("CPU")
        ray.shutdown()
    finally:
        other.shutdown()
    print("CPUS", cpus)
""")


def test_a_run_starts_its_own_ray_beside_another_on_the_machine():
    # In a child process: the other Ray announces itself machine-wide, as a `ray start` head does.
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CPUS 3.0" in done.stdout, done.stdout + done.stderr[-2000:]
