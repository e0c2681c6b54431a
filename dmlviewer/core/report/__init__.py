"""The report of issue 33: retrieval failures explained, in one self-contained HTML file."""

from .failures import Failure, retrieval_failures
from .report import ReportModel, build_report, read_pairs

__all__ = ["Failure", "ReportModel", "build_report", "read_pairs", "retrieval_failures"]
