"""OpenAI and Azure OpenAI: the provider, its streamed answers and its Batch API."""
