"""Helpers for the real-browser test: a JupyterLab server in a sandbox, and process tracking."""
