"""What a `tlt train` run leaves under its directory: metrics.csv, the trace (its meta records the
policy as the user wrote it and the start tables beside it), checkpoints to resume from, and the
final drafter for serving. `TrainingRun` (real/run/coordinator.py) holds one `RunOutputs`."""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from real.run.capture import machine_info
from real.run.checkpoints import Checkpoint, save_checkpoint
from real.run.config import RunConfig
from real.run.engine_plan import EnginePlan
from real.run.records import RunRows, StepRecord, metrics_frame
from real.run.sd_pricing import SDVerdict
from real.run.task_source import TaskSource
from real.tiny.model import variant_of
from workbench.contracts.fileio import write_atomic, write_dir_atomic
from workbench.contracts.schema import to_mapping
from workbench.contracts.trace import Trace, write_trace


class RunOutputs:
    """A run's records so far and the files they go to."""

    def __init__(self, cfg: RunConfig, source: TaskSource):
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.metrics: list[StepRecord] = []
        self.rows = RunRows()
        self.next_step = 0
        self.clock0 = time.time()
        self.settings: dict[str, Any] = {}  # the engines' settings, for the trace
        self.probe: SDVerdict | None = None  # SD's verdict before step 0 (None: not probed)
        self.probe_off = False  # whether the probe turned SD off before step 0
        # seconds the run's set-up took: engines, the plain engine, the probe
        self.setup_s = math.nan
        # the reward the model was built for (real/tiny/task.py)
        self.variant = variant_of(cfg.model)
        self.source = source  # the prompts and the reward, named in the trace

    def add(self, rec: StepRecord) -> None:
        """Step `rec.rl_step`'s record; the next step is the one after it."""
        self.metrics.append(rec)
        self.next_step = rec.rl_step + 1

    def metrics_frame(self) -> pd.DataFrame:
        return metrics_frame(self.metrics)

    def trace(self) -> Trace:
        cfg = self.cfg
        probe = None
        if self.probe:
            probe = {**asdict(self.probe), "speedup": self.probe.speedup, "sd_off": self.probe_off}
        meta = {"model": str(Path(cfg.model).resolve()), "policy": to_mapping(cfg.policy),
                "start_tables": {k: list(v) for k, v in cfg.start_tables.items()},
                "start_source": cfg.start_source, "sd_probe": probe, "setup_s": self.setup_s,
                "prompts": cfg.prompts, "samples": cfg.samples, "max_tokens": cfg.max_tokens,
                "seed": cfg.seed, "mix": cfg.mix, "temperature": cfg.temperature,
                "workers": cfg.workers, "machine": machine_info(), "engine": self.settings,
                "task": self.source.name, "reward": self.source.reward_name,
                "task_variant": self.variant,
                "source": "tlt train",
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        return self.rows.frames(meta)

    def write(self) -> None:
        """metrics.csv and trace/ under the run directory (atomic; rewritten after every step)."""
        write_atomic(self.out / "metrics.csv", self.metrics_frame().to_csv(index=False))
        if self.rows.steps:
            write_trace(self.trace(), self.out / "trace")

    def checkpoint(self, model_dir: Path, drafter_dir: Path | None,
                   worker_states: list[dict[str, Any]], engines: EnginePlan, trainer: Any,
                   buffer: Any) -> None:
        """Everything a resumed run needs after the last finished step, then the outputs."""
        import torch

        files = {
            "model": lambda p: shutil.copytree(model_dir, p),
            "trainer.pt": lambda p: torch.save(trainer.state_dict(), p),
            "workers.pt": lambda p: torch.save(worker_states, p),
            "buffer.pt": lambda p: torch.save(buffer, p),
            "rows.pt": lambda p: torch.save(self.rows, p),
        }
        if drafter_dir is not None:
            files["drafter"] = lambda p: shutil.copytree(drafter_dir, p)
        state = {**engines.state_dict(), "metrics": [asdict(m) for m in self.metrics],
                 "elapsed_s": time.time() - self.clock0, "policy": to_mapping(self.cfg.policy),
                 "seed": self.cfg.seed}
        save_checkpoint(self.out, self.next_step - 1, state, files)
        self.write()

    def restore(self, ckpt: Checkpoint, engines: EnginePlan) -> EnginePlan:
        """The records and the engines' plan a checkpoint saved."""
        import torch

        st = ckpt.state
        self.next_step = ckpt.step + 1
        self.metrics = [StepRecord.from_dict(m) for m in st["metrics"]]
        self.rows = torch.load(ckpt.path("rows.pt"), weights_only=False)
        self.clock0 = time.time() - st["elapsed_s"]
        return engines.load_state_dict(st)

    def export_drafter(self, drafter_dir: Path | None) -> Path | None:
        """The final drafter as a checkpoint vLLM loads for serving (run_dir/drafter)."""
        if drafter_dir is None:
            return None
        src = Path(drafter_dir)
        return write_dir_atomic(self.out / "drafter",
                                lambda tmp: shutil.copytree(src, tmp, dirs_exist_ok=True))
