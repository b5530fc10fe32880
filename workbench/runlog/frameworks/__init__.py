"""Other RL frameworks' run logs read as veRL's (workbench/runlog/reader.py dispatches here): one
module per framework, each with its declared table of metric names, and the recogniser."""
