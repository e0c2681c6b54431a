"""The dataset formats dmlviewer reads, by name: one list for the command line, the app's menus
and the last session's checks, importable without numpy or torch (``formats.READERS`` holds a
reader for each, in this order)."""

FORMATS = ("cub", "cars196", "sop", "inshop", "cvusa", "folder")
