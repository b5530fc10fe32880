"""The TLT paper, reproduced by the simulator: `tlt paper`.

`profiles` fits GPU profiles to the paper's microbenchmarks
(workbench/calibrate/published/microbenchmarks.py)
and carries them to its four models by shape; `reproduce` simulates the paper's evaluation
(`tlt-eval-*` workloads x `baseline`, `tlt-base`, `tlt`) and sets each published figure beside
the simulator's, marking which rows were fitted and which are predictions.
"""
