"""Machinery under everything: the background event loop, tracing spans, the media store, and
one-line errors for a home that cannot be written."""
