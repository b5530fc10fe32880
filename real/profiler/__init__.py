"""`python -m real.profiler`: an operator-level cost profiler of a model on one device.

It instantiates an architecture (a Hugging Face `config.json`, workbench/contracts/
architecture.py) with random weights, measures one tensor-parallel rank's decoder layer, head
and EAGLE drafter over a grid of batch, context and tokens (the points a Profile needs), and
writes the measurements as Parquet; `tlt profile` fits a Profile to them
(workbench/calibrate/captures/operators.py). By job: `shard` (TP shapes and the assumed
collectives),
`grid` (what is measured), `ops` (the operators in plain torch), `timing` (medians, CUDA events
and graphs), `measure` (the measuring), `table` (the Parquet file).

It must run on a bare GPU machine whose Python has only torch, numpy, pandas, pyarrow and
pyyaml (and transformers): it imports those, the standard library and workbench.contracts,
nothing else (tests/real/test_profiler.py checks the import closure). This file imports
nothing, so reading measurements (`table`) needs no torch.
"""
