"""Measurements on the real backend: rollout and training benchmarks, drafter drift, the vLLM check and
the SD guard's checks."""
