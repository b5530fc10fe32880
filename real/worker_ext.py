"""Methods mixed into vLLM's worker class, to reload weights in place.

vLLM imports this class in its worker processes by its module path
(`worker_extension_cls="real.worker_ext.TLTWorkerExtension"`), so this module must stay
importable without side effects. `self` is the worker (vLLM's `CPUWorker` or `Worker`); the
methods are reached through `LLM.collective_rpc("method_name", args=...)`.

Target weights reload through vLLM's own `reload_weights`; the EAGLE drafter is not touched by
it, so `reload_drafter` runs vLLM's layerwise reload on the drafter module (docs/vllm-cpu-notes.md).
"""

from __future__ import annotations

from pathlib import Path


class TLTWorkerExtension:
    def tlt_apply_cpu_fixes(self) -> bool:
        """Correct vLLM-CPU's sampling under speculative decoding in this worker (real/vllm_fixes.py)."""
        from real.vllm_fixes import apply_cpu_fixes

        return apply_cpu_fixes()

    def tlt_reload_target(self, path: str) -> bool:
        """Same as `collective_rpc("reload_weights", kwargs={"weights_path": path})`."""
        self.model_runner.reload_weights(weights_path=str(path))
        return True

    def tlt_reload_drafter(self, path: str) -> float:
        """Load an EAGLE checkpoint directory's weights into the running drafter, in place.

        Returns a probe of the drafter's `fc` layer (a number that changes with its weights):
        on CPU vLLM prepacks linear weights and `weight` becomes empty, so the layer is probed
        by running it.
        """
        from safetensors.torch import load_file
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload.layerwise import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        drafter = getattr(self.model_runner, "drafter", None)
        model = getattr(drafter, "model", None)
        if model is None or not hasattr(model, "model") or not hasattr(model.model, "fc"):
            raise RuntimeError("this engine has no EAGLE drafter to reload (start it with an eagle policy)")
        weights = {}
        for file in sorted(Path(path).glob("*.safetensors")):
            weights.update(load_file(str(file)))
        if not weights:
            raise FileNotFoundError(f"{path}: no *.safetensors weights")
        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(model)
            model.load_weights(iter(weights.items()))
            finalize_layerwise_reload(model, self.vllm_config.speculative_config.draft_model_config)
        return self.tlt_drafter_probe()

    def tlt_drafter_probe(self) -> float:
        import torch

        fc = self.model_runner.drafter.model.model.fc
        with torch.no_grad():
            x = torch.linspace(-1.0, 1.0, fc.input_size).reshape(1, -1)
            param = next(iter(fc.parameters()), None)
            if param is not None:
                x = x.to(device=param.device, dtype=param.dtype)
            return float(fc(x).double().sum())
