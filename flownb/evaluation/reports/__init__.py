"""What :func:`flownb.evaluate` returns and reads back: the report (``report``), evaluations kept
in the run log (``history``), a report logged to MLflow (``tracking``)."""
