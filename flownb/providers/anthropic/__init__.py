"""Anthropic's Claude: the provider and its Message Batches."""
