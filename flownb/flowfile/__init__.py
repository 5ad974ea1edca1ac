"""The exported flow file as data: the model and its checks, substitution, variable
validation, variants, lint, and the flow drawn."""
