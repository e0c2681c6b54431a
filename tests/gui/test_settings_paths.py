"""Typed paths never raise in the settings helpers: ``~nobody`` (no such user) stays as typed."""

from __future__ import annotations

from pathlib import Path

from dmlviewer.gui.window import settings


def test_unknown_user_home_stays_as_typed_and_start_dir_falls_back(tmp_path):
    typed = "~no_such_user_dmlviewer/run/features.h5"
    assert settings.expand_user(typed) == Path(typed)
    assert Path(settings.start_dir(typed)).is_dir()  # the output folder, not an exception
    target = settings.output_path_for(typed, "features")
    assert target.name == "features.h5" and target.parent.is_dir()


def test_home_is_expanded():
    assert settings.expand_user("~/x.h5") == Path.home() / "x.h5"
