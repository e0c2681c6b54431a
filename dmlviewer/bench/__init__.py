"""Benchmarks behind ``dmlviewer bench``: each measures the project against its baseline in one run."""
