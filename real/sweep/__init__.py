"""The engine sweep (`tlt engine-sweep`): one real vLLM engine's step times and acceptance at held
batch sizes, contexts and draft lengths, SD off and on, interleaved, written cell by cell as a
trace set (workbench/contracts/sweep.py). `methods` (the target, the drafter, the speculative
methods the installed vLLM offers), `prompts` (a held batch's prompts at a context), `blocks`
(one engine's blocks of a cell, on its own clock), `run` (the sweep).
"""
