"""Measurement and demonstration programs of the lab: run with vm-test/tool NAME [ARGS]."""
