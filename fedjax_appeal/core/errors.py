"""The user-facing error type (a leaf module, so every layer may raise it)."""


class ConfigError(ValueError):
    """A user-facing configuration problem; its message is one line that says how to fix it."""
