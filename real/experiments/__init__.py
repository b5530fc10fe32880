"""Measurements on the real backend: rollout and training benchmarks, drafter drift, the vLLM
check and the checks of the SD guard's plain engine and probe."""
