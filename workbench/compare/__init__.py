"""Alternatives judged in the simulator, over the same seeds.

- `policies.py`: scheduling policies over seeds, their spread, why one is faster (`tlt compare`).
- `regret.py`: the online bandits against the oracle schedule (`tlt regret`).
- `sd_curve.py`: SD's speedup against the batch on one engine: where SD pays (`tlt sd-curve`).
"""
