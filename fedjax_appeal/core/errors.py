"""The user-facing error type (a leaf module, so every layer may raise it)."""


class ConfigError(ValueError):
    """A user-facing configuration problem; its message is one line that says how to fix it."""


class UndeclaredOption(LookupError):
    """A component read a configuration field it did not declare (a programming error, not
    a user's: declare the field where the component lists its options)."""
