"""Test helpers users can import too: a loopback OpenAI-compatible server."""
