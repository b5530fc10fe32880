"""Cluster-shape search (`tlt plan`, the Plan page): for a GPU type and a budget (at most N GPUs)
or a deadline (D days), which shape of rollout engines runs the whole RL job fastest or cheapest,
and the Pareto front between them.

A shape is (TP, rollout engines, max batch per engine, policy). Each Optuna trial (NSGA-II,
seeded) picks one; its profile is derived from NVIDIA's measured operator database for
(model, GPU, TP, framework) and kept on disk (`database.catalog.disk_cached_profile`, so a
TP already derived, in this plan or an earlier one, is read, not derived again); the run is
projected with `workbench/project.py` (days, GPU-hours, cost, energy; in full or sampled, as
`tlt project`).
Objectives: days and cost, both minimised; energy is reported.

GPU counts searched: the cap (the budget N, or `max_gpus` under a deadline) and its halves down to
1/16 of it (`gpu_choices`); a shape whose count TP does not divide is infeasible. Engine shapes (TP,
max batch) are screened before the search, and one that cannot run is kept in the plan with why
(`screened`), never proposed: the model's bf16 weights per GPU at that TP must fit the GPU's memory
(the package's system spec, less its NCCL and runtime reserves) with room left for one sequence's KV
cache at the workload's cap; TP must split the model's heads; and, since the simulator does not
model KV-cache preemption, the engine's KV cache must hold a full batch (max_batch sequences of the
prompt plus the mean response length, `mean_response_tokens`), else it would preempt and run slower
than simulated. A deadline-missed shape is simulated and kept, marked, and never chosen.

Modules: `fit` (does an engine fit the GPU: weights, KV cache, mean lengths), `search` (the spec,
the shapes and the evaluation of a shape), `study` (the NSGA-II study), `result` (the plan it
returns and the files it writes).

Chosen shape: under a budget, the fastest feasible shape (ties: the cheaper); under a deadline,
the cheapest shape that meets it (ties: the faster); none when no shape qualifies.
"""

from workbench.plan.fit import KV_BYTES, MemoryFit, mean_response_tokens, memory_fit
from workbench.plan.result import ROW_HEADERS, SCHEMA, Plan, shape_rows
from workbench.plan.search import (
    ANY,
    DEFAULT_SAMPLE_STEPS,
    PlanSpec,
    PlanTrial,
    Shape,
    choose,
    gpu_choices,
    pareto_front,
)
from workbench.plan.study import run_plan

__all__ = ["ANY", "DEFAULT_SAMPLE_STEPS", "ROW_HEADERS", "SCHEMA", "KV_BYTES", "MemoryFit",
           "Plan", "PlanSpec", "PlanTrial", "Shape", "choose", "gpu_choices",
           "mean_response_tokens", "memory_fit", "pareto_front",
           "run_plan", "shape_rows"]
