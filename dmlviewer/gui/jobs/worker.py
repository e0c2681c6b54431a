"""Former home of the job classes, split by idea into :mod:`.job` (the job model),
:mod:`.runner` (the queue and its threads), :mod:`.process` (process isolation) and
:mod:`.latest` (the latest-only runner).

Kept only as re-exports for ``gui/pair`` and ``gui/window/main_window.py`` (edited on other
branches while this split was made); import from the modules above, and delete this file once
they do.
"""

from dmlviewer.gui.jobs.job import Job, JobEvents, JobState
from dmlviewer.gui.jobs.latest import LatestRunner
from dmlviewer.gui.jobs.runner import JobRunner, confirm_close

__all__ = ["Job", "JobEvents", "JobState", "JobRunner", "LatestRunner", "confirm_close"]
