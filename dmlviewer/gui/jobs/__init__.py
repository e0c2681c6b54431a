"""Background work: the job queue and runner, the Jobs dock, the status bar's progress."""
