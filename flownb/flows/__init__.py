"""The flow objects users hold: local flows, remote flows and their client, flows by value."""
