"""The ``phaseflow`` command line."""
