"""`python -m real.gpu_check` (`make gpu-check`): one prepared check of the real backend on a GPU.

On a CUDA machine it runs, in a few minutes and within a time budget per section:
- `correctness`: the GRPO update (packed) and one EAGLE drafter step on the shipped tiny model,
  CUDA (bf16 autocast) against the CPU (float32): losses and updated weights within a stated
  tolerance;
- `grpo-*`: the packed GRPO update against the padded one (tokens/s) on random-weight models of
  Qwen2.5-0.5B's and 1.5B's shapes;
- `drafter-train`: spot-training samples/s of an EAGLE drafter at Qwen2.5-7B's hidden size,
  plain (right-padded) batches against sequence packing;
- `engine-*`: the operator profiler (real/profiler, what `tlt profile --backend torch` runs) on
  Qwen2.5-7B's shape (TP1, bf16, grid `gpu-check`), with and without CUDA graphs, and the EAGLE
  draft step at 7B and 32B.
- `moe-layers`: one MoE layer of five MoE models' shapes, timed by the tokens it routes (the
  experts a verify pass touches against a decode step's: SD's cost on a MoE target).
On a CPU the same sections run at tiny shapes (`plan.quick_plan`): the test suite runs it so.

It writes one JSON file and a Markdown summary (`record.py`), rewritten atomically after every
section, so a run cut short leaves what it had. `tlt gpu-check --measured FILE` compares the
file with the measured database (workbench/calibrate/gpu_check/comparison.py). It imports only what
a
bare GPU machine's Python has (torch, transformers, safetensors, numpy, pandas, pyarrow, yaml),
our `real` modules and workbench.contracts: tests/real/test_gpu_check.py checks the closure.
This file imports nothing.
"""
