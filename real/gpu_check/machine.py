"""The machine's facts: GPU name, memory, driver, clocks (nvidia-smi, where it answers), torch and
transformers versions, the CPU; and the slug that names the output files."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys

# nvidia-smi's query fields, in order (clocks in MHz, memory in MiB, power in W).
SMI_FIELDS = (
    "name",
    "driver_version",
    "memory.total",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "power.limit",
    "temperature.gpu",
    "pstate",
    "persistence_mode",
)


def nvidia_smi() -> dict:
    """The first GPU's SMI_FIELDS, or {"error": why} where nvidia-smi is absent or fails."""
    cmd = ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"nvidia-smi: {exc}"}
    if res.returncode != 0 or not res.stdout.strip():
        return {"error": f"nvidia-smi exited {res.returncode}: {res.stderr.strip()[:200]}"}
    values = [v.strip() for v in res.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(SMI_FIELDS, values))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def facts(device: str) -> dict:
    """What a result depends on, read at the start of the run."""
    import torch
    import transformers

    out = {
        "device": device,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        out.update(
            gpu=torch.cuda.get_device_name(0),
            memory_gib=round(p.total_memory / 2**30, 2),
            multiprocessors=p.multi_processor_count,
            capability=f"{p.major}.{p.minor}",
            l2_cache_bytes=getattr(p, "L2_cache_size", None),
            gpu_count=torch.cuda.device_count(),
            nvidia_smi=nvidia_smi(),
        )
    return out


def gpu_slug(machine: dict) -> str:
    """'h100-80gb-hbm3' for 'NVIDIA H100 80GB HBM3'; 'cpu' without a GPU."""
    name = machine.get("gpu")
    if not name:
        return "cpu"
    name = re.sub(r"^nvidia\s+", "", str(name).strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"
