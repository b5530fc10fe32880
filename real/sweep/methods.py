"""The engine a sweep measures: a target and a drafter given as a directory or a Hugging Face hub
id (the local cache first), the speculative methods the installed vLLM offers, and the
`speculative_config` of each (no engine starts here: everything is checked before one does).
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from real.drafter.layout import METHODS as EAGLE_METHODS
from real.drafter.layout import DrafterError
from real.drafter.resolve import resolve_drafter
from real.hub_cache import cache_dir, cached_snapshot, is_hub_id
from real.rollout.spec_config import NGRAM_LOOKUP_MAX, NGRAM_LOOKUP_MIN
from workbench.contracts.policy import DrafterKind

NGRAM = "ngram"
# Methods whose drafter is a model of its own (`--drafter`); vLLM's names.
MODEL_METHODS = ("eagle", "eagle3", "draft_model", "medusa", "mlp_speculator")
# A model's own multi-token-prediction heads: any of vLLM's "*mtp" methods, no --drafter; the
# config.json fields that say how many such layers a model has.
MTP_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers",
              "mtp_num_layers")


class SweepError(ValueError):
    """A sweep that cannot run as asked, found before any engine starts (names the option)."""


@dataclass(frozen=True)
class ModelRef:
    """A model given as a directory or a hub id, and the directory it is read from."""

    ref: str  # as the user gave it
    path: Path  # a directory with config.json
    hub_id: str | None  # the hub id, when it came from the Hugging Face cache

    @property
    def name(self) -> str:
        return self.hub_id or str(self.path.resolve())


def resolve_model(ref: str, option: str) -> ModelRef:
    """A directory as given; a hub id (`owner/name`) from the local Hugging Face cache
    (real/hub_cache.py), downloaded only when absent there. Refused naming `option` when neither
    gives a config.json."""
    p = Path(ref).expanduser()
    if not is_hub_id(ref):
        if not (p / "config.json").is_file():
            raise SweepError(f"{option} {ref}: no config.json (give a Hugging Face model directory "
                             "or hub id owner/name)")
        return ModelRef(ref, p, None)
    path = cached_snapshot(ref)
    if path is None:
        try:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(ref, cache_dir=str(cache_dir())))
        except Exception as exc:
            raise SweepError(f"{option} {ref}: not in the local Hugging Face cache "
                             f"({cache_dir()}) and not downloadable here "
                             f"({type(exc).__name__}); download it on a machine with access "
                             f"(`hf download {ref}`) or give its directory") from None
    if not (path / "config.json").is_file():
        raise SweepError(f"{option} {ref}: the cached snapshot {path} has no config.json")
    return ModelRef(ref, path, ref)


def check_drafter(method: str, drafter: ModelRef | None, target: ModelRef) -> list[str]:
    """An EAGLE or EAGLE-3 head checked against its target before any engine starts
    (real/drafter/resolve.py: architecture, hidden size, vocabulary, the layers it reads); the
    notes of what was and was not checked. Other methods: nothing to check here."""
    if drafter is None or method not in EAGLE_METHODS:
        return []
    try:
        return resolve_drafter(str(drafter.path), target.path, method).notes()
    except DrafterError as exc:
        raise SweepError(f"--drafter {drafter.ref}: {exc}") from None


def installed_methods() -> tuple[str, ...]:
    """vLLM's speculative methods, as the installed version names them."""
    try:
        from vllm.config.speculative import SpeculativeMethod
    except ImportError as exc:
        raise SweepError(f"the sweep needs vLLM ({exc}); install the project with its 'cpu' or "
                         "'gpu' extra") from None

    def flat(tp: Any) -> list[str]:
        args = typing.get_args(tp)
        return [a for t in args for a in (flat(t) if typing.get_args(t) else [t])
                if isinstance(a, str)]

    return tuple(dict.fromkeys(flat(SpeculativeMethod)))


def is_mtp(method: str) -> bool:
    return method.endswith("mtp")


def live_switching() -> bool:
    """Whether the installed vLLM changes draft lengths between two steps of one engine (its
    Dynamic SD table, the scheduler's `dynamic_sd_lookup`)."""
    try:
        import vllm.v1.spec_decode.dynamic.utils  # noqa: F401
    except ImportError:
        return False
    return True


def cost_kind(method: str) -> DrafterKind:
    """How the profile prices a method's drafting: a lookup per sequence (n-gram) or a model's
    forward per draft step (every other method: sim/costs.py's EAGLE form)."""
    return DrafterKind.NGRAM if method == NGRAM else DrafterKind.EAGLE


def check_method(method: str, drafter: ModelRef | None, target: ModelRef,
                 offered: tuple[str, ...]) -> None:
    if method not in offered:
        raise SweepError(f"--method {method}: this vLLM offers {', '.join(offered)}")
    if method in MODEL_METHODS and drafter is None:
        raise SweepError(f"--method {method} drafts with a model of its own: give --drafter DIR "
                         "or hub id")
    if method not in MODEL_METHODS and drafter is not None:
        raise SweepError(f"--method {method} takes no --drafter (it drafts from "
                         f"{'the prompt' if method == NGRAM else 'the model'})")
    if method != NGRAM and method not in MODEL_METHODS and not is_mtp(method):
        raise SweepError(f"--method {method}: the sweep runs ngram, {', '.join(MODEL_METHODS)} "
                         "and the MTP methods (*mtp)")
    if is_mtp(method):
        cfg = json.loads((target.path / "config.json").read_text(encoding="utf-8"))
        cfg = {**cfg, **(cfg.get("text_config") or {})}
        if not any(int(cfg.get(f) or 0) > 0 for f in MTP_FIELDS):
            raise SweepError(f"--method {method}: {target.ref} has no multi-token-prediction "
                             f"layers (none of {', '.join(MTP_FIELDS)} in its config.json); "
                             "give a drafter method instead")


def speculative(method: str, k: int, drafter: ModelRef | None, max_num_seqs: int,
                live: bool) -> dict[str, Any]:
    """vLLM's `speculative_config` for `k` draft tokens; `live`: with the Dynamic SD table whose
    lookup the sweep rewrites between steps (real/rollout/engine.py's adaptive engines)."""
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method == NGRAM:
        spec.update(prompt_lookup_max=NGRAM_LOOKUP_MAX, prompt_lookup_min=NGRAM_LOOKUP_MIN)
    elif drafter is not None:
        spec["model"] = str(drafter.path)
    if live:
        spec["num_speculative_tokens_per_batch_size"] = [[1, max_num_seqs, k]]
    return spec


def trace_policy(method: str | None, k: int, max_num_seqs: int) -> dict[str, Any]:
    """The policy a sweep trace's meta records: its drafter kind as the profile prices it (the
    draft length of each step is the sweep's, meta["sweep"]["blocks"])."""
    if method is None:
        return {"name": "engine-sweep-plain", "drafter": {"kind": "none"}}
    return {"name": f"engine-sweep-{method}", "sd_threshold": max_num_seqs,
            "schedule": [[1, max_num_seqs, k]], "bandit": {"algorithm": "fixed"},
            "drafter": {"kind": str(cost_kind(method))}, "spot_training": {"enabled": False}}
