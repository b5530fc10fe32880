"""A drafter as a user names it (a checkpoint directory or a Hugging Face hub id) -> vLLM's method,
the config checked against the target, and what could not be checked: `resolve_drafter`, the one
place `tlt export`, `tlt train` and the engines resolve `--drafter`.

What is checked offline (a local directory, or a hub id in this machine's Hugging Face cache):
config.json's architecture is one vLLM runs for the method (real/drafter/layout.py), weights are
present, and against the target when it is known: the hidden size the head reads, the vocabulary,
and for EAGLE-3 the target layers it reads and its `fc` input. A hub id not in the cache is
accepted with a note that none of it was checked (vLLM loads the id as it is); its method is then
the one named, or what vLLM infers from the name. A mismatch raises `DrafterError` naming the
field (hidden size, vocabulary, architecture) and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from real.drafter.layout import (
    EAGLE,
    EAGLE3,
    EAGLE3_VARIANTS,
    METHODS,
    TRAINABLE,
    VLLM_ARCHITECTURES,
    DrafterError,
    HeadFiles,
    aux_layer_ids,
    default_aux_layers,
    detect_method,
    method_from_name,
    read_head,
    text_config,
    vllm_architecture,
)
from real.hub_cache import cache_dir, cached_snapshot, is_hub_id


@dataclass(frozen=True)
class DrafterRef:
    """A resolved drafter: what vLLM / SGLang are given and what was (not) checked."""

    given: str  # as the user named it
    method: str  # vLLM's method: "eagle" or "eagle3"
    model: str  # what an engine is given: the hub id as named, or the directory's absolute path
    local: Path | None  # its files on this machine (the directory, or the cache's snapshot)
    architecture: str | None  # as vLLM runs it (None: not read)
    checked: tuple[str, ...]
    unchecked: tuple[str, ...]
    aux_layers: tuple[int, ...] = ()  # EAGLE-3: the target layers it reads (when known)
    config: dict[str, Any] | None = field(default=None, repr=False)  # its config.json, when read

    def notes(self) -> list[str]:
        """One line of what was checked, one per thing that was not."""
        lines = [f"drafter {self.given}: method {self.method}; checked: "
                 f"{'; '.join(self.checked)}"] if self.checked else []
        return lines + [f"not checked: {u}" for u in self.unchecked]


@dataclass(frozen=True)
class TargetConfig:
    """The target's config as far as it could be read (None: not on this machine)."""

    name: str
    config: dict[str, Any] | None


def target_config(target: str | Path | None) -> TargetConfig | None:
    """The target model's config.json from its directory or the hub cache; None: no target."""
    if target is None:
        return None
    name = str(target)
    path = cached_snapshot(name) if is_hub_id(name) else Path(name).expanduser()
    file = path / "config.json" if path is not None else None
    if file is None or not file.is_file():
        return TargetConfig(name, None)
    try:
        return TargetConfig(name, text_config(json.loads(file.read_text())))
    except (OSError, ValueError):
        return TargetConfig(name, None)


def resolve_drafter(drafter: str | Path, target: str | Path | None = None,
                    method: str | None = None, need_local: bool = False) -> DrafterRef:
    """`drafter` (a directory or a hub id) resolved and checked against `target` (a model
    directory or hub id; None: not checked against one). `method` names vLLM's method where the
    files cannot say (a hub id not in the cache); given with files, it must agree with them.
    `need_local`: the files must be on this machine (training reads the weights).
    DrafterError names the field and the fix."""
    given = str(drafter)
    if method is not None and method not in METHODS:
        raise DrafterError(f"drafter method {method!r}: give {' or '.join(METHODS)} (vLLM's "
                           "names)")
    tgt = target_config(target)
    if is_hub_id(given):
        snap = cached_snapshot(given)
        if snap is None or not (snap / "config.json").is_file():
            return _uncached(given, method, need_local, tgt)
        return _from_files(given, given, snap, method, need_local, tgt)
    path = Path(given).expanduser()
    if not path.is_dir():
        raise DrafterError(f"drafter {given}: no such directory (give an EAGLE or EAGLE-3 "
                           "checkpoint directory, or a hub id owner/name)")
    return _from_files(given, str(path.resolve()), path, method, need_local, tgt)


def _uncached(given: str, method: str | None, need_local: bool,
              tgt: TargetConfig | None) -> DrafterRef:
    if need_local:
        raise DrafterError(f"drafter {given}: a hub id that this machine's Hugging Face cache "
                           f"({cache_dir()}) does not hold, and its weights are needed here; "
                           f"fetch it first (`hf download {given}`), or give its directory")
    source = "as named" if method else "from the id, as vLLM infers it"
    method = method or method_from_name(given)
    if method is None:
        raise DrafterError(f"drafter {given}: not in this machine's Hugging Face cache, and its "
                           "name does not say its method: name it (--drafter-method eagle or "
                           "eagle3)")
    unchecked = [f"{given} is not in this machine's Hugging Face cache: its architecture, sizes "
                 f"and weights were not checked (vLLM loads the id as it is; method {method} "
                 f"{source})"]
    return DrafterRef(given, method, given, None, None, (), tuple(unchecked + _no_target(tgt)))


def _no_target(tgt: TargetConfig | None) -> list[str]:
    if tgt is None:
        return ["the drafter against its target (give the target model to check hidden size "
                "and vocabulary)"]
    if tgt.config is None:
        return [f"the drafter against the target {tgt.name}: its config.json is not on this "
                "machine"]
    return []


def _from_files(given: str, model: str, path: Path, method: str | None, need_local: bool,
                tgt: TargetConfig | None) -> DrafterRef:
    head = read_head(path, f"drafter {given}")
    unchecked: list[str] = []
    if not head.weights:
        if need_local or not is_hub_id(given):
            raise DrafterError(f"drafter {given}: no weights in {path} (*.safetensors or "
                               "pytorch_model*.bin)")
        unchecked.append(f"{given}'s weights are not in this machine's Hugging Face cache "
                         "(vLLM downloads them)")
    found = detect_method(head)
    if method is not None and found is not None and method != found:
        raise DrafterError(f"drafter {given}: architecture {head.architectures} is an {found} "
                           f"head, not {method}: name its method as {found}")
    method = method or found or method_from_name(given)
    if method is None:
        raise DrafterError(f"drafter {given}: architecture {head.architectures} is no EAGLE or "
                           "EAGLE-3 head vLLM runs (config.json's architectures); give an EAGLE "
                           "or EAGLE-3 checkpoint")
    arch, checked = _architecture(given, head, method)
    if tgt and tgt.config:
        aux = _check_target(given, head, method, tgt, checked)
    else:  # the layers its config names; vLLM's default depends on the target
        aux = (aux_layer_ids(head.config) or ()) if method == EAGLE3 else ()
    unchecked += _no_target(tgt)
    if head.weights:
        checked.append(f"{len(head.weights)} weight file(s), {len(head.tensors)} tensors")
    return DrafterRef(given, method, model, path, arch, tuple(checked), tuple(unchecked), aux,
                      head.config)


def check_trainable(ref: DrafterRef, target_layers: int) -> None:
    """What `tlt train`'s spot trainer can continue (real/drafter/eagle.py, eagle3.py): a
    Llama-layer EAGLE or one-layer EAGLE-3 head whose files are here, reading target layers below
    the last (transformers returns the last one after the final norm only)."""
    if ref.local is None or ref.config is None:
        raise DrafterError(f"drafter {ref.given}: not on this machine; the spot trainer reads its "
                           f"weights (fetch it first: `hf download {ref.given}`)")
    if ref.architecture not in TRAINABLE[ref.method]:
        raise DrafterError(f"drafter {ref.given}: architecture {ref.architecture}: the spot "
                           "trainer continues " + ", ".join(
                               f"{m} heads {'/'.join(a)}" for m, a in TRAINABLE.items())
                           + "; run it without spot training (spot_training.enabled: false, "
                           "drafter.ngram_fallback: false), or give such a head")
    cfg = ref.config
    for flag in EAGLE3_VARIANTS:
        if cfg.get(flag) or (cfg.get("eagle_config") or {}).get(flag):
            raise DrafterError(f"drafter {ref.given}: {flag}: true (config.json): the spot "
                               "trainer continues the plain EAGLE-3 head only")
    if ref.method == EAGLE3 and int(cfg.get("num_hidden_layers", 1)) != 1:
        raise DrafterError(f"drafter {ref.given}: num_hidden_layers {cfg['num_hidden_layers']}: "
                           "the spot trainer continues one-layer EAGLE-3 heads only")
    if ref.aux_layers and max(ref.aux_layers) >= target_layers:
        raise DrafterError(f"drafter {ref.given}: reads target layer {max(ref.aux_layers)} "
                           "(eagle_aux_hidden_state_layer_ids), the last layer's output before "
                           "the final norm, which transformers does not return: the spot trainer "
                           "cannot feed it")


def _architecture(given: str, head: HeadFiles, method: str) -> tuple[str | None, list[str]]:
    """The architecture vLLM runs the head as, refused when vLLM has none for the method."""
    if "speculators_model_type" in head.config:
        return None, [f"speculators config ({head.config['speculators_model_type']})"]
    archs = head.architectures
    if not archs:
        raise DrafterError(f"drafter {given}: config.json names no architectures (vLLM picks "
                           "the drafter's class from it)")
    arch = vllm_architecture(archs[0], method)
    if arch not in VLLM_ARCHITECTURES[method]:
        raise DrafterError(f"drafter {given}: architecture {archs[0]} (vLLM: {arch}) is no "
                           f"{method} drafter vLLM runs ({', '.join(VLLM_ARCHITECTURES[method])})")
    if method == EAGLE and "fc.bias" in head.tensors:
        raise DrafterError(f"drafter {given}: fc.bias: vLLM's {arch} has no bias on fc (older "
                           "SafeAILab EAGLE heads carry one); drop it, or use a head without")
    return arch, [f"architecture {archs[0]} (vLLM {arch})"]


def _check_target(given: str, head: HeadFiles, method: str, tgt: TargetConfig,
                  checked: list[str]) -> tuple[int, ...]:
    """Hidden size, vocabulary and (EAGLE-3) target layers against the target's config."""
    cfg, t = head.config, tgt.config or {}
    t_hidden, t_vocab = t.get("hidden_size"), t.get("vocab_size")
    reads = cfg.get("target_hidden_size") or cfg.get("hidden_size")
    field = "target_hidden_size" if cfg.get("target_hidden_size") else "hidden_size"
    if reads and t_hidden and int(reads) != int(t_hidden):
        raise DrafterError(f"drafter {given}: hidden size {reads} (config.json {field}) is not "
                           f"the target's {t_hidden} ({tgt.name}): a drafter reads its target's "
                           "hidden states; give the drafter trained for this target")
    vocab = cfg.get("vocab_size")
    if vocab and t_vocab and int(vocab) != int(t_vocab):
        raise DrafterError(f"drafter {given}: vocabulary {vocab} (config.json vocab_size) is not "
                           f"the target's {t_vocab} ({tgt.name}): the drafter's tokens are the "
                           "target's; give the drafter trained for this target's tokenizer")
    checked.append(f"hidden size {t_hidden} and vocabulary {t_vocab} match {tgt.name}")
    if method != EAGLE3:
        return ()
    layers = int(t.get("num_hidden_layers") or 0)
    aux = aux_layer_ids(cfg) or default_aux_layers(layers)
    if any(not 0 <= i <= layers for i in aux):
        raise DrafterError(f"drafter {given}: reads target layers {list(aux)} "
                           f"(eagle_aux_hidden_state_layer_ids) but {tgt.name} has {layers}")
    fc = head.tensors.get("fc.weight")
    if fc is not None and t_hidden and fc[-1] != len(aux) * int(t_hidden):
        raise DrafterError(f"drafter {given}: fc.weight reads {fc[-1]} features, not "
                           f"{len(aux)} target layers x hidden size {t_hidden} ({tgt.name})")
    checked.append(f"reads target layers {list(aux)}")
    return aux
