"""The cluster a What-if simulates: engines x model x GPU x TP x framework, always on the page.

A preset's own cluster is picked first (its profile, as shipped); changing any of the four
derives a profile for the new cluster from NVIDIA's measured operator database
(workbench/calibrate/database/profile.py; cached per process), with TP the engine's GPUs. A length
file (or a run log) has no cluster of its own: every box starts empty and nothing simulates
until the user has said where the lengths ran; no hardware is taken from an unrelated preset.
A profile preset or file may still be picked instead (`other_profile`); one whose TP, GPU, model or
framework contradicts the workload is refused, naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import streamlit as st

from workbench.contracts.cluster_check import check_workload_profile
from workbench.contracts.profile import Profile, load_profile, profile_presets
from workbench.contracts.provenance import profile_choice_label, provenance
from workbench.contracts.schema import ConfigError, FieldError
from workbench.contracts.workload import Workload
from workbench.ui.inputs import parse_upload

FALLBACK_BASE = (
    "h100-qwen2.5-7b-tp1"  # acceptance and learning curve when nothing closer is shipped
)
TP_CHOICES = (1, 2, 4, 8)
FROM_CLUSTER = "(the cluster's)"


@dataclass(frozen=True)
class Choice:
    """What the boxes say (None: not chosen yet)."""

    model: str | None
    gpu: str | None
    tp: int | None
    framework: str | None
    engines: int

    @property
    def complete(self) -> bool:
        return None not in (self.model, self.gpu, self.tp, self.framework)


@lru_cache(maxsize=1)
def _options() -> tuple[dict[str, str], list[str], tuple[str, ...]]:
    """Models (name -> preset or config path), GPUs and frameworks of the measured database."""
    from workbench.calibrate.database.catalog import model_choices
    from workbench.calibrate.database.aiconfigurator import FRAMEWORKS, gpu_names

    return model_choices(), gpu_names(), tuple(FRAMEWORKS)


@lru_cache(maxsize=1)
def model_list() -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """The Model box's entries, one per model the database tells apart (a preset and the package's
    config of the same shape are one entry: the preset, labelled with the other names), and those
    other names by entry."""
    from workbench.calibrate.database.catalog import same_models

    models = _options()[0]
    also = same_models(models)
    hidden = {n for names in also.values() for n in names}
    return [n for n in models if n not in hidden], also


def model_label(name: str) -> str:
    also = model_list()[1].get(name)
    return f"{name} (also {', '.join(also)})" if also else name


def _own(workload: Workload) -> tuple[str, str, int, str] | None:
    """The workload's cluster as its profile records it (None: the profile records none or does not
    load)."""
    try:
        c = load_profile(workload.profile).cluster
    except (ConfigError, FieldError, ValueError):
        return None
    if c is None:
        return None
    # a model the box offers under another name (the same shape) is that entry
    model = next((entry for entry, names in model_list()[1].items() if c.model in names), c.model)
    return model, c.gpu, workload.gpus_per_worker, c.framework


def _box(col, label: str, options: list, value, key: str, hlp: str, shown=str):
    index = options.index(value) if value in options else None
    return col.selectbox(label, options, index=index, key=key, placeholder="pick", help=hlp,
                         format_func=shown)


def _choose(workload: Workload, wl_id: str, own: tuple | None, ask: bool) -> Choice:
    _, gpus, fws = _options()
    models = model_list()[0]
    model, gpu, tp, fw = (None,) * 4 if ask or own is None else own
    tps = sorted(set(TP_CHOICES) | ({workload.gpus_per_worker} if not ask else set()))
    c = st.columns([1.5, 1, 0.8, 1, 0.9])
    m = _box(
        c[0],
        "Model",
        list(models),
        model,
        f"whatif_cluster_model:{wl_id}",
        "The model your lengths came from (an architecture preset or one of the database's "
        "configs).",
        model_label,
    )
    # A preset's own GPU may be in no database (a traced run's H20): it is offered as its own.
    gpus = list(gpus) + ([gpu] if gpu is not None and gpu not in gpus else [])
    g = _box(
        c[1], "GPU", gpus, gpu, f"whatif_cluster_gpu:{wl_id}", "GPU type of the rollout engines."
    )
    t = _box(
        c[2],
        "TP",
        tps,
        tp,
        f"whatif_cluster_tp:{wl_id}",
        "Tensor-parallel degree: GPUs per engine.",
    )
    f = _box(
        c[3],
        "Framework",
        list(fws),
        fw,
        f"whatif_cluster_fw:{wl_id}",
        "The engine whose costs apply.",
    )
    engines = int(
        c[4].number_input(
            "Engines",
            min_value=1,
            value=workload.workers,
            step=1,
            key=f"whatif_cluster_engines:{wl_id}",
            help="Data-parallel rollout engines.",
        )
    )
    return Choice(m, g, t, f, engines)


def _base_for(model: str) -> str:
    """Acceptance and learning curve: the same model's published-fit H100 profile where one is
    shipped."""
    same = sorted(
        p for p in profile_presets() if p.startswith(f"h100-{model}-tp") and p.count("-") == 3
    )
    return same[0] if same else FALLBACK_BASE


def pick(
    workload: Workload, wl_id: str, ask: bool = False
) -> tuple[Workload | None, Profile | None]:
    """The cluster boxes and the workload on that cluster with its profile; (None, None) until
    chosen. `ask`: the workload has no cluster of its own (a length file): the boxes start empty."""
    own = None if ask else _own(workload)
    if own is None and not ask:
        # A profile without a GPU cluster (this machine's CPU engines): keep it unless asked to
        # move.
        if not st.toggle("Put it on a GPU cluster", value=False, key=f"whatif_cluster_on:{wl_id}"):
            st.caption(f"Cluster: profile **{workload.profile}**, which records no GPU cluster.")
            return workload, _load(workload.profile)
    choice = _choose(workload, wl_id, own, ask)
    if not choice.complete:
        st.info(
            "Choose the model, GPU, TP and framework your lengths ran on: the simulation waits for "
            "them."
        )
        return None, None
    wl = replace(workload, workers=choice.engines, gpus_per_worker=choice.tp)
    if own is not None and (choice.model, choice.gpu, choice.tp, choice.framework) == own:
        st.caption(
            f"The workload's own profile **{workload.profile}**: "
            f"{provenance(_load(workload.profile))}."
        )
        return wl, _load(workload.profile)
    models = _options()[0]
    arch = models[choice.model]
    ep = _expert_parallel(arch, choice.tp, wl_id)
    try:
        with st.spinner(f"Deriving the profile of {choice.tp}x {choice.gpu} "
                        f"({choice.framework})…"):
            from workbench.calibrate.database.catalog import cached_profile

            prof = cached_profile(
                arch, choice.gpu, choice.tp, choice.framework, _base_for(choice.model), ep=ep
            )
    except (ConfigError, ValueError, RuntimeError) as exc:
        st.error(f"No profile for this cluster: {exc}")
        return None, None
    c = prof.cluster
    st.caption(f"{prof.description}. {provenance(prof)}")
    return replace(wl, profile=prof.name, model=c.model, gpu=c.gpu, framework=c.framework), prof


def _expert_parallel(arch: str, tp: int, wl_id: str) -> int | None:
    """A mixture-of-experts model's expert parallelism inside the engine (None: the framework's
    default, EP1); no box for a dense model."""
    from workbench.contracts.architecture import load_architecture

    try:
        if not load_architecture(arch).is_moe:
            return None
    except ConfigError:
        return None
    options = [None] + [n for n in range(1, tp + 1) if tp % n == 0]
    return st.selectbox(
        "Expert parallelism", options, index=0, key=f"whatif_cluster_ep:{wl_id}",
        format_func=lambda n: "default (EP1)" if n is None else f"EP{n}",
        help="A mixture of experts: EP1 splits every expert over the engine's TP GPUs (vLLM's "
        "and SGLang's default); EP = TP gives each GPU whole experts.")


def _load(name: str) -> Profile | None:
    try:
        return load_profile(name)
    except (ConfigError, FieldError) as exc:
        st.error(f"Profile '{name}' cannot be loaded: {exc}. Pick a cluster or a preset profile.")
        return None


def other_profile(workload: Workload, profile: Profile | None, wl_id: str) -> Profile | None:
    """An expander to simulate with another profile (a preset, e.g. the paper-fitted one, or a
    file), checked against the workload's cluster; the cluster's profile otherwise."""
    with st.expander("Another profile (a preset or a file)", expanded=False):
        options = [FROM_CLUSTER, *profile_presets()]
        name = st.selectbox(
            "Profile",
            options,
            index=0,
            key=f"whatif_profile:{wl_id}",
            format_func=lambda n: n if n == FROM_CLUSTER else profile_choice_label(n),
            help="Measured: `tlt profile`; published: fitted to the TLT paper's microbenchmarks; "
            "calibrated: fitted to traces of real runs.",
        )
        upload = st.file_uploader(
            "Or a profile file", type=["yaml", "yml", "json"], key=f"whatif_profile_file:{wl_id}"
        )
        if upload is not None:  # read where it is, in memory: nothing written for it
            try:
                return checked(workload, parse_upload(Profile, upload))
            except (ConfigError, FieldError) as exc:
                st.error(f"Profile file rejected: {exc}")
                return None
        if name == FROM_CLUSTER:
            return profile
        picked = _load(name)
        return checked(workload, picked)


def checked(workload: Workload, profile: Profile | None) -> Profile | None:
    """The picked profile if it describes the workload's
    cluster; else None, with the field named."""
    if profile is None:
        return None
    try:
        check_workload_profile(workload, profile)
    except ConfigError as exc:
        st.error(
            f"The profile does not describe this workload's cluster: {exc}. Or pick the cluster "
            "above."
        )
        return None
    return profile
