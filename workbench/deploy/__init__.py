"""Beyond one process: a tuned policy for another stack, and sweeps on a Ray cluster.

- `export.py`: a policy as vLLM, SGLang / FastRL or veRL take it (`tlt export`); `sglang.py` the
  SGLang / FastRL arguments; `exported.py` what an export is, its shared notes and its drafter.
- `file_text.py`: the exported files' text (header comments, YAML, bash arrays).
- `distributed.py`: sweeps and projections as Ray tasks, the same units as in one process.
"""
