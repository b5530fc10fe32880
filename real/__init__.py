"""The real TLT backend: GRPO on vLLM rollouts with spot drafter training and adaptive SD.

It imports only `workbench.contracts` (policies, traces, seeds, file writing); torch, vLLM and
Ray are imported by the modules that need them. Each subpackage's docstring says what it holds
and each module's docstring its one job; the top-level modules are the GRPO update (`grpo`), its
packed, padding-free forwards (`packing`), attention within each sequence of a packed row
(`span_attention`, GRPO's and the drafter's) and torch helpers for modules that must import
without torch (`torch_utils`).
"""
