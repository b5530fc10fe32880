"""Response lengths in, the Workload's length model out: read length logs (`reader`), fit the model
by one of two methods, report and write the Workload (`build`; `tlt workload import`).

The two fits serve two kinds of data. A length table (logs, PolyTrace, veRL metrics) may lack
correctness and holds its steps as batches: `mixture` matches a censored two-component lognormal
mixture to its quantiles and clip ratio (`tlt workload import --mode fit`). A trace's responses
carry their rewards, RL steps and cut-at-the-cap flags: `tobit` regresses log length on them by
censored maximum likelihood (`tlt calibrate --lengths-out`).

Agentic runs (multi-turn trajectories with tool calls) come in as a turns table instead:
`agentic_reader` reads PolyTrace's multi-turn log or the generic one-row-per-turn table,
`agentic_fit` fits the trajectory model with its correlations, `agentic_build` reports and writes
the agentic Workload (`tlt workload import` picks this path by the files' content).
"""
