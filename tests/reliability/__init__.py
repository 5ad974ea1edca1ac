"""Helpers for the reliability suites: real ``flownb`` processes on loopback, and what they leave
behind (logs, FLOWNB_HOME folders, error bodies) for the secrets suite to scan."""
