"""The check that a workload and a profile describe the same cluster (model x GPU x TP x
framework): a profile's costs hold for its cluster only (workbench/contracts/cluster.py)."""

from __future__ import annotations

from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import Workload


def check_workload_profile(wl: Workload, prof: Profile, source: str = "") -> None:
    """Refuse a workload whose cluster contradicts its profile's, naming the workload field.

    A profile that records no cluster (hand-set, or fitted to traces of an unrecorded shape)
    constrains nothing; a workload field left empty ("") takes the profile's."""
    c = prof.cluster
    if c is None:
        return
    where = source or f"workload {wl.name!r}"
    if wl.gpus_per_worker != c.tp:
        raise ConfigError(where, "gpus_per_worker", wl.gpus_per_worker,
                          f"{c.tp}, the TP of profile {prof.name!r} ({c.label}); or derive a "
                          f"profile for TP {wl.gpus_per_worker}: `tlt profile --backend "
                          f"aiconfigurator --arch {c.model} --gpu {c.gpu} --tp "
                          f"{wl.gpus_per_worker} --out P.yaml`")
    for field, want in (("gpu", c.gpu), ("model", c.model), ("framework", c.framework)):
        have = getattr(wl, field)
        if have and want and have != want:
            raise ConfigError(where, field, have,
                              f"{want!r}, the {field} of profile {prof.name!r} ({c.label}); "
                              f"or pick a profile derived for {field} {have!r}")
