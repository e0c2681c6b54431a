"""Package data of dmlviewer (icons, style sheet, demo checkpoint), read with importlib.resources."""

from importlib import resources
from pathlib import Path


def resource_path(name: str) -> Path:
    """Path of a file shipped in this package (works installed, editable and frozen)."""
    return Path(str(resources.files(__name__).joinpath(name)))
