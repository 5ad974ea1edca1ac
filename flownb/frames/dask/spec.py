"""Moved to :mod:`flownb.flows.spec` (flows by value sit below the flow classes); this name stays
so code that imported it keeps working."""

from ...flows.spec import FlowSpec, Rebuildable, _flows, flow_from_spec, spec_of

__all__ = ["FlowSpec", "Rebuildable", "_flows", "flow_from_spec", "spec_of"]
