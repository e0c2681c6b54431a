"""Benchmarks behind ``dmlviewer bench``: each measures the project against its baseline in one run."""


class BenchError(RuntimeError):
    """A benchmark could not run (reported by ``dmlviewer bench`` in one line, exit status 1)."""
