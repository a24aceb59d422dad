"""voice-stack-gateway: a Wyoming server in front of OpenAI-compatible STT/TTS servers."""

__version__ = "0.1.0"
