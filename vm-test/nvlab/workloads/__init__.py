"""Workloads run in host VMs: the writer loop, the AEN victim, SQLite."""
