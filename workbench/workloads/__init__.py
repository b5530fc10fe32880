"""Response lengths in, the Workload's length model out: read length logs (`reader`), fit the model
by one of two methods, report and write the Workload (`build`; `tlt workload import`).

The two fits serve two kinds of data. A length table (logs, PolyTrace, veRL metrics) may lack
correctness and holds its steps as batches: `mixture` matches a censored two-component lognormal
mixture to its quantiles and clip ratio (`tlt workload import --mode fit`). A trace's responses
carry their rewards, RL steps and cut-at-the-cap flags: `tobit` regresses log length on them by
censored maximum likelihood (`tlt calibrate --lengths-out`).
"""
