"""Checkers: invariants proven from the media and the writers' records."""
