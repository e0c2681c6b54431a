"""Sub-commands of the ``dmlviewer`` command line, one module each (see ``dmlviewer.cli``)."""
