"""Checks of option values for the kinds' constructors: a bad value raises ValueError starting
`<option>=<value> must be ...`, which training/validate.py reports as a config error."""
import numbers


def _refuse(option: str, value, requirement: str, why: str):
    raise ValueError(f"{option}={value!r} must be {requirement}" + (f"; {why}" if why else ""))


def _is_number(value, kind: type) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def at_least(option: str, value, low: int, why: str = "") -> None:
    """An integer option of at least `low`."""
    if not (_is_number(value, numbers.Integral) and value >= low):
        _refuse(option, value, f"an integer >= {low}", why)


def positive(option: str, value, why: str = "") -> None:
    if not (_is_number(value, numbers.Real) and value > 0):
        _refuse(option, value, "a number > 0", why)


def non_negative(option: str, value, why: str = "") -> None:
    if not (_is_number(value, numbers.Real) and value >= 0):
        _refuse(option, value, "a number >= 0", why)


def fraction(option: str, value) -> None:
    """A share of something (a dropout rate): in [0, 1)."""
    if not (_is_number(value, numbers.Real) and 0 <= value < 1):
        _refuse(option, value, "a number in [0, 1)", "")


def one_of(option: str, value, choices) -> None:
    if value not in choices:
        _refuse(option, value, "one of " + ", ".join(map(repr, choices)), "")
