"""Flows by value, where they were first importable: :mod:`flownb.core.spec` holds them (the
runnable core builds and rebuilds local flows)."""

from __future__ import annotations

from ..core.spec import FlowSpec, Rebuildable, flow_from_spec, spec_of

__all__ = ["FlowSpec", "Rebuildable", "flow_from_spec", "spec_of"]
