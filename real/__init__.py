"""The real TLT backend: GRPO on vLLM rollouts with spot drafter training and adaptive SD.

It imports only `workbench.contracts` (policies, traces, seeds, file writing); torch, vLLM and
Ray are imported by the modules that need them. By job:

- `real.tiny`: our task and model: the GCD reasoning task and its reward (`task`), the character
  tokenizer (`tokenizer`), and the tiny Qwen2 built and SFT-trained on the task (`model`).
- `real.rollout`: decoding on vLLM: the Policy -> `speculative_config` translation
  (`spec_config`, no vLLM needed), requests and step rows (`requests`), the engine
  (`engine.RolloutEngine`), bandit-chosen draft lengths between engine steps (`adaptive`), and
  what runs inside vLLM's worker (`worker_ext`, `vllm_fixes`).
- `real.drafter`: the EAGLE drafter: the module and its loss (`eagle`), training from a target
  (`training`), checkpoints vLLM loads (`checkpoint`), the hidden-state records it trains on
  (`records`) and spot training on idle rollout workers (`spot`).
- `real.grpo`: the GRPO policy update; `real.packing`: its packed, padding-free forwards.
- `real.run`: `tlt train` and `tlt capture`: the Ray rollout worker (`worker`), the coordinator of
  RL steps (`coordinator`), its step records, timeline and trace (`records`), atomic run
  checkpoints (`checkpoints`) and one-rollout trace capture (`capture`).
- `real.experiments`: measurements: `tlt bench rollout` (`bench_rollout`), `tlt bench grpo`
  (`bench_grpo`), `tlt bench real` (`bench_training`), drafter drift
  (`python -m real.experiments.drift`) and the vLLM check of a model directory
  (`python -m real.experiments.check_vllm`).
"""
