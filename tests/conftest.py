"""Shared fixtures: small synthetic data and models built on the fly (nothing downloaded)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
