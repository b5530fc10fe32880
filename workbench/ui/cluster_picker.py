"""The cluster a What-if simulates: model x GPU x TP x framework.

Either the profile is derived from those four (NVIDIA's measured operator database, via
workbench/calibrate/measured_gpu.py; cached per process), with TP the workload's GPUs per
worker, or a picked profile must agree with the workload: a profile whose TP, GPU, model or
framework contradicts it is refused, naming the field, instead of silently describing
another cluster.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import replace
from pathlib import Path

import streamlit as st

from workbench.contracts.cluster import check_workload_profile
from workbench.contracts.profile import Profile, provenance
from workbench.contracts.schema import ConfigError, FieldError
from workbench.contracts.workload import Workload

FALLBACK_BASE = "h100-qwen2.5-7b-tp1"  # acceptance and learning curve when the workload's profile does not load


def derive_toggle(wl_id: str) -> bool:
    return st.toggle("Derive the profile from the cluster", value=False, key=f"whatif_cluster_on:{wl_id}",
                     help="Model x GPU x TP x framework: every cost from NVIDIA's measured vLLM/SGLang operator "
                          "latencies (aiconfigurator-core); TP is the workload's GPUs per worker.")


def _uploaded_config(upload) -> str | None:
    """An uploaded config.json, kept under a directory named by its content (the model's name)."""
    if upload is None:
        return None
    data = upload.getvalue()
    tag = hashlib.sha256(data).hexdigest()[:8]
    d = Path(tempfile.gettempdir()) / "tlt-uploaded-configs" / f"{Path(upload.name).stem}-{tag}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_bytes(data)
    return str(d / "config.json")


def _choose(workload: Workload, wl_id: str) -> tuple[str, str, str]:
    from workbench.calibrate.gpu_catalog import model_choices
    from workbench.calibrate.measured_gpu import FRAMEWORKS, gpu_names

    models, gpus = model_choices(), gpu_names()
    c1, c2, c3 = st.columns(3)
    m_names = list(models)
    model = c1.selectbox("Model", m_names, key=f"whatif_cluster_model:{wl_id}",
                         index=m_names.index(workload.model) if workload.model in m_names else 0)
    gpu = c2.selectbox("GPU", gpus, key=f"whatif_cluster_gpu:{wl_id}",
                       index=gpus.index(workload.gpu) if workload.gpu in gpus else 0)
    fws = list(FRAMEWORKS)
    framework = c3.selectbox("Framework", fws, key=f"whatif_cluster_fw:{wl_id}",
                             index=fws.index(workload.framework) if workload.framework in fws else 0)
    own = _uploaded_config(st.file_uploader("Or your model's config.json", type=["json"],
                                            key=f"whatif_cluster_config:{wl_id}"))
    return (own or models[model]), gpu, framework


def cluster_profile(workload: Workload, wl_id: str) -> tuple[Workload, Profile | None]:
    """The profile derived for the chosen cluster at the workload's TP, and the workload naming it."""
    from workbench.calibrate.gpu_catalog import cached_profile
    from workbench.contracts.profile import load_profile

    arch, gpu, framework = _choose(workload, wl_id)
    try:
        load_profile(workload.profile)
        base = workload.profile
    except (ConfigError, FieldError):
        base = FALLBACK_BASE
    try:
        with st.spinner(f"Deriving the profile of {workload.gpus_per_worker}x {gpu} ({framework})…"):
            prof = cached_profile(arch, gpu, workload.gpus_per_worker, framework, base)
    except (ConfigError, ValueError) as exc:
        st.error(f"No profile for this cluster: {exc}")
        return workload, None
    c = prof.cluster
    st.caption(f"{prof.description}. {provenance(prof)}")
    return replace(workload, profile=prof.name, model=c.model, gpu=c.gpu, framework=c.framework), prof


def checked(workload: Workload, profile: Profile | None) -> Profile | None:
    """The picked profile if it describes the workload's cluster; else None, with the field named."""
    if profile is None:
        return None
    try:
        check_workload_profile(workload, profile)
    except ConfigError as exc:
        st.error(f"The profile does not describe this workload's cluster: {exc}. Or turn on "
                 "**Derive the profile from the cluster**.")
        return None
    return profile
