"""The training dialog: its form, its monitor and the run's lifecycle."""
