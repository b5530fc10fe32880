"""NVIDIA's measured operator database (aiconfigurator-core) -> a Profile for any cluster."""
