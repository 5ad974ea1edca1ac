"""Jupyter integration: ``%load_ext flownb`` magics, widget forms and display helpers."""
