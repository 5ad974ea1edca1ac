"""A run: the plan and its execution (engine), the one path to it (pipeline), what it
returns (result, events), the hooks the features plug into, the call cache and the run log."""
