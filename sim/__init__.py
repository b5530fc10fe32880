"""Discrete-event simulator of RL steps with long-tail rollouts (SimPy).

`simulator.py` runs the step loop of the policy's rollout mode (`sync_steps.py`,
`async_steps.py`, `stream_steps.py`) over a step's rollout (`rounds.py`,
`dynamic_sampling.py`) on a pool of engines (`rollout.py`, `streaming.py`, `engine.py`), with
the entities in `entities.py` and the pure models in `lengths.py`, `groups.py`, `costs.py`,
`acceptance.py` and `drafter.py`; `results.py` holds what a run produces, `sweep.py` runs many.
"""
