"""The `tlt` command line (layer 3): parse, call the tools, print.

Commands live by job: `simulate.py` (sim, presets, check, compare, regret, bench sim), `tune.py`
(tune), `calibrate.py` (calibrate), `validation.py` (validate), `profile.py` (profile:
operator-level measurement or the measured database), `gpu.py` (gpu-check, gpu-presets),
`sd_curve.py` (sd-curve: SD's speedup by batch), `moe_check.py` (moe-check: MoE decode steps against
NVIDIA's end-to-end measurements), `real.py` (model, capture, bench rollout, bench grpo),
`drafter.py` (drafter train, convert, check), `sweep.py` (engine-sweep, and calibrate on a sweep),
`train.py` (train, bench real), `runlog_tools.py` (runlog extract and transfer: a console log's
metrics extracted with its provenance, the transfer table of the shipped logs), `paper.py` (the TLT
paper's figures), `project.py`
(whole-run days, GPU-hours, cost, energy), `plan.py` (the cluster shape for a budget or a deadline),
`workload.py` (workload import and show: lengths from logs), `agentic.py` (workload check: an
agentic trace re-simulated), `tail.py` (tail: real rollouts' drains beside the
simulator's), `export.py` (export: a policy for vLLM, SGLang / FastRL or veRL) and `task.py`
(task: task files). Importing them registers their commands on the groups in `apps.py`, in this
order, which is the order `tlt --help` lists them in.
"""

from workbench.cli import simulate  # noqa: F401, I001
from workbench.cli import tune  # noqa: F401
from workbench.cli import calibrate  # noqa: F401
from workbench.cli import validation  # noqa: F401
from workbench.cli import profile  # noqa: F401
from workbench.cli import gpu  # noqa: F401
from workbench.cli import sd_curve  # noqa: F401
from workbench.cli import moe_check  # noqa: F401
from workbench.cli import real  # noqa: F401
from workbench.cli import sweep  # noqa: F401
from workbench.cli import drafter  # noqa: F401
from workbench.cli import train  # noqa: F401
from workbench.cli import runlog_tools  # noqa: F401
from workbench.cli import paper  # noqa: F401
from workbench.cli import workload  # noqa: F401
from workbench.cli import agentic  # noqa: F401
from workbench.cli import tail  # noqa: F401
from workbench.cli import export  # noqa: F401
from workbench.cli import project  # noqa: F401
from workbench.cli import task  # noqa: F401
from workbench.cli import plan  # noqa: F401
from workbench.cli.apps import app

__all__ = ["app"]
