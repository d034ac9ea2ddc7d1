"""The user-facing error type (a leaf module, so every layer may raise it)."""


class ConfigError(ValueError):
    """A user-facing configuration problem; its message is one line that says how to fix it."""


class UndeclaredOption(LookupError):
    """A component read a configuration option not declared for it (a programming error, not
    a user's: declare the option where it applies); `option` and `component` name them."""

    def __init__(self, message: str, option: str = "", component: str = ""):
        super().__init__(message)
        self.option, self.component = option, component


def refuse_class(arg: str, value: object) -> None:
    """Refuse, in one line, a class given as argument `arg` where an instance of it is
    expected (`selector=DivFL` for `selector=DivFL()`)."""
    if isinstance(value, type):
        raise ConfigError(f"{arg}={value.__name__} is a class: give an instance, "
                          f"{arg}={value.__name__}(...)")
