"""Methods mixed into vLLM's worker class: the CPU sampling fix and an in-place drafter reload.

vLLM imports this class in its worker processes by its module path
(`worker_extension_cls="real.rollout.worker_ext.TLTWorkerExtension"`), so this module must stay
importable without side effects. `self` is the worker (vLLM's `CPUWorker` or `Worker`); the
methods are reached through `LLM.collective_rpc("method_name", args=...)`.

Target weights reload through vLLM's own `reload_weights`; the EAGLE drafter is not touched by
it, so `tlt_reload_drafter` runs vLLM's layerwise reload on the drafter module
(docs/vllm-cpu-notes.md).
"""

from __future__ import annotations

from pathlib import Path

from real.rollout.vllm_fixes import apply_cpu_fixes


class TLTWorkerExtension:
    def tlt_apply_cpu_fixes(self) -> bool:
        """Correct vLLM-CPU's sampling under speculative decoding in this worker
        (real/rollout/vllm_fixes.py)."""
        return apply_cpu_fixes()

    def tlt_reload_drafter(self, path: str) -> None:
        """Load an EAGLE checkpoint directory's weights into the running drafter, in place."""
        from safetensors.torch import load_file
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload.layerwise import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        drafter = getattr(self.model_runner, "drafter", None)
        model = getattr(drafter, "model", None)
        if model is None or not hasattr(model, "model") or not hasattr(model.model, "fc"):
            raise RuntimeError(
                "this engine has no EAGLE drafter to reload (start it with an eagle policy)"
            )
        weights = {}
        for file in sorted(Path(path).glob("*.safetensors")):
            weights.update(load_file(str(file)))
        if not weights:
            raise FileNotFoundError(f"{path}: no *.safetensors weights")
        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(model)
            model.load_weights(iter(weights.items()))
            finalize_layerwise_reload(model, self.vllm_config.speculative_config.draft_model_config)
