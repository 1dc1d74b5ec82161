"""topoplan: network topology design and planning for LLM training clusters."""

__version__ = "0.1.0"
