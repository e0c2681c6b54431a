"""Entry script of the frozen (PyInstaller) app: the same ``dmlviewer`` command line."""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()  # training jobs run in spawned processes
    from dmlviewer.cli import main

    sys.exit(main())
