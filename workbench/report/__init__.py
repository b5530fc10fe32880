"""What the tools show, in plain text and figures.

- `tables.py`: plain-text tables for the command line and the tools' reports.
- `plots.py`: each worker's running batch over one RL step (the long tail, drawn).
"""
