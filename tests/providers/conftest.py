"""The fake OpenAI-compatible server, as a fixture for every provider test."""

from tests.providers.fake_openai_server import fake_openai

__all__ = ["fake_openai"]
