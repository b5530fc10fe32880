"""EngineMechanisms: what one release of an engine (SGLang, vLLM) does to a speculative pass that a
plain decode step does not pay, as a Profile prices it (`Profile.mechanisms`; the pricing is
`sim/costs.py`'s).

Each engine release captures CUDA graphs for its own batch sizes, which differ between plain
decoding and the speculative passes (draft, draft-extend, verify); above them a pass runs eager,
and an eager forward takes as long as the host needs to launch its kernels when that is longer
than the kernels themselves. Its host handles every proposed token of every sequence (Python
lists, stop checks) between the GPU's steps, work that grows with batch x draft length; vLLM's
first engine verified drafts by batch expansion, reading each sequence's KV cache once per
verified token. A drafter whose LM head spans the target's whole vocabulary reads all of it in
every draft forward. The values come from the engine's own source at that release (the graph
limits, the verify's form) or from a named public measurement (the host's costs):
`traces/published/engine-versions.yaml` holds both, with where each was read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.contracts.schema import require

MAX_GRAPH = 1 << 20  # "every size": a capture limit no pass reaches


@dataclass(frozen=True)
class EngineMechanisms:
    """One engine release's speculative-pass mechanisms, and the costs that price them."""

    framework: str  # "sglang", "vllm"
    version: str  # the release whose source the limits were read from
    # The largest step each pass replays a CUDA graph for (0: always eager). Counted in sequences,
    # or in tokens where `graphs_by_tokens` (vLLM V1 keys graphs on a step's tokens: a verify of
    # B x (K + 1)); the drafter's extend is its forward over the tokens the target accepted.
    plain_graph_max: int = MAX_GRAPH
    verify_graph_max: int = MAX_GRAPH
    draft_graph_max: int = MAX_GRAPH
    extend_graph_max: int = MAX_GRAPH
    graphs_by_tokens: bool = False
    # Host seconds to launch one eager forward's kernels: the target's, and one drafter step's.
    target_launch_s: float = 0.0
    draft_launch_s: float = 0.0
    # Host seconds per sequence per draft step of a pass (the proposals' Python lists, per-token
    # acceptance bookkeeping), not overlapped with the GPU: B x K of them a pass.
    host_s_per_seq_step: float = 0.0
    # Drafts scored by batch expansion (vLLM V0 with CUDA graphs): each verified token re-reads
    # its sequence's KV cache.
    kv_read_per_token: bool = False
    # One drafter forward's read of an LM head over the target's full vocabulary, and the share of
    # it the drafter's own head spans (1: the full vocabulary, as EAGLE-1 and FastRL's drafters;
    # an EAGLE-3 head with a 32k draft vocabulary on Llama-3: 0.25).
    draft_head_s: float = 0.0
    draft_vocab_share: float = 1.0
    # Recorded, not priced: the engine's default cap on running requests with SD (0: none), which
    # RL frameworks override (FastRL: 512).
    sd_running_cap: int = 0
    source: str = ""  # where each value was read or fitted

    def check(self) -> None:
        require(bool(self.framework.strip()), "framework", self.framework,
                "an engine (sglang, vllm)")
        require(bool(self.version.strip()), "version", self.version, "the engine's release")
        for name in ("plain_graph_max", "verify_graph_max", "draft_graph_max", "extend_graph_max",
                     "sd_running_cap"):
            v = getattr(self, name)
            require(0 <= v <= MAX_GRAPH, name, v, f"an integer from 0 to {MAX_GRAPH}")
        for name in ("target_launch_s", "draft_launch_s", "host_s_per_seq_step", "draft_head_s"):
            v = getattr(self, name)
            require(math.isfinite(v) and 0.0 <= v < 1.0, name, v, "seconds, >= 0 and < 1")
        require(0.0 < self.draft_vocab_share <= 1.0, "draft_vocab_share", self.draft_vocab_share,
                "a share above 0, at most 1")

    @property
    def label(self) -> str:
        return f"{self.framework} {self.version}"

    def graph_size(self, batch: int, tokens_per_seq: int) -> int:
        """A pass's size as the engine counts it against its capture limits."""
        return batch * tokens_per_seq if self.graphs_by_tokens else batch
