"""Layer 0: the contracts every other layer imports (Policy, Workload, Profile, Bandit, Trace,
seeds, file reading and writing). It imports nothing else of the project."""
