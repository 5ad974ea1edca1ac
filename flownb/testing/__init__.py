"""Test helpers users can import too: loopback servers speaking the OpenAI
(:mod:`~flownb.testing.fake_openai`), Anthropic (:mod:`~flownb.testing.fake_anthropic`) and
Gemini (:mod:`~flownb.testing.fake_gemini`) HTTP APIs."""
