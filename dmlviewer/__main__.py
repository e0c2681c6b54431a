"""``python -m dmlviewer`` runs the same entry point as the ``dmlviewer`` command."""

import sys

from dmlviewer.cli import main

if __name__ == "__main__":
    sys.exit(main())
