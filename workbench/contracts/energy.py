"""What a run costs in the user's currency: GPU power per state, energy and money.

The simulator tells how long each GPU spends decoding, training (the policy update and the
drafter's spot training) and idle (bubbles, weight syncs, waits); these pure functions turn
GPU-seconds into kWh and GPU-hours into money. Watts come from measured data (a profile's
`power`, or the user's `--gpu-watts`), never from a default.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.contracts.schema import FieldError, require

JOULES_PER_KWH = 3.6e6
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class GpuPower:
    """Mean electrical power of one GPU in each state, in watts (board power, as `nvidia-smi` reads
    it)."""

    decode_w: float  # decoding (rollout, with or without speculative decoding)
    idle_w: float  # allocated but waiting: bubbles, weight syncs, waits for the trainer
    train_w: float  # training: the policy update and the drafter's spot training
    source: str = ""  # where the figures come from

    def check(self) -> None:
        for name in ("decode_w", "idle_w", "train_w"):
            v = getattr(self, name)
            require(0.0 <= v <= 5000.0, name, v, "watts per GPU, from 0 to 5000")

    @classmethod
    def parse(cls, text: str, source: str = "") -> GpuPower:
        """'DECODE,IDLE,TRAIN' watts per GPU, e.g. '650,120,700'."""
        parts = [p.strip() for p in text.split(",")]
        try:
            values = [float(p) for p in parts]
        except ValueError:
            values = []
        if len(values) != 3:
            raise FieldError("gpu_watts", text,
                             "three numbers DECODE,IDLE,TRAIN in watts per GPU, e.g. 650,120,700")
        power = cls(*values, source=source)
        power.check()
        return power


@dataclass(frozen=True)
class GpuSeconds:
    """GPU-seconds spent in each power state (summed over GPUs)."""

    decode: float
    idle: float
    train: float

    @property
    def total(self) -> float:
        return self.decode + self.idle + self.train

    def __add__(self, other: GpuSeconds) -> GpuSeconds:
        return GpuSeconds(self.decode + other.decode, self.idle + other.idle,
                          self.train + other.train)

    def scaled(self, factor: float) -> GpuSeconds:
        return GpuSeconds(self.decode * factor, self.idle * factor, self.train * factor)


def energy_kwh(seconds: GpuSeconds, power: GpuPower) -> float:
    """Energy of the GPUs alone (no host, network or cooling): sum over states of GPU-seconds x
    watts."""
    joules = (seconds.decode * power.decode_w + seconds.idle * power.idle_w
              + seconds.train * power.train_w)
    return joules / JOULES_PER_KWH


def gpu_hours(seconds: GpuSeconds) -> float:
    return seconds.total / SECONDS_PER_HOUR


def cost(gpu_hours_: float, price_per_gpu_hour: float) -> float:
    """Money for the GPU-hours at a price per GPU-hour (cloud prices bill allocated GPUs, busy or
    idle)."""
    if price_per_gpu_hour < 0:
        raise FieldError("price_per_gpu_hour", price_per_gpu_hour, "a price >= 0")
    return gpu_hours_ * price_per_gpu_hour
