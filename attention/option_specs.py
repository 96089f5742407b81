"""The options of the attention kinds as they declare them, and the rules their values must meet.

Each base lists the options every kind on it reads (`BASE_OPTIONS`: ScoreAttention's dropout_rate,
KernelizedAttention's eps, chunk_size and kernelized_implementation) and each kind the ones it adds, or
narrows by name (`OWN_OPTIONS`: DotAttention's softmax_implementation, gated_linear's one path);
attention/registry.py composes the two. A value is checked by its declaration, no kind built: a bad one raises
ValueError starting `<option>=<value> must be ...`, which training/validate.py reports as a config error."""
import dataclasses
import numbers
from typing import Callable


def _refuse(option: str, value, requirement: str, why: str):
    raise ValueError(f"{option}={value!r} must be {requirement}" + (f"; {why}" if why else ""))


def _is_number(value, kind: type) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


# Rules: each returns the check (option, value) -> None of a kind of value, raising through _refuse.

def at_least(low: int, why: str = ""):
    """An integer option of at least `low`."""
    def check(option, value):
        if not (_is_number(value, numbers.Integral) and value >= low):
            _refuse(option, value, f"an integer >= {low}", why)
    return check


def positive(why: str = ""):
    def check(option, value):
        if not (_is_number(value, numbers.Real) and value > 0):
            _refuse(option, value, "a number > 0", why)
    return check


def non_negative(why: str = ""):
    def check(option, value):
        if not (_is_number(value, numbers.Real) and value >= 0):
            _refuse(option, value, "a number >= 0", why)
    return check


def fraction():
    """A share of something (a dropout rate): in [0, 1)."""
    def check(option, value):
        if not (_is_number(value, numbers.Real) and 0 <= value < 1):
            _refuse(option, value, "a number in [0, 1)", "")
    return check


def even_degree(why: str):
    """The degree of a polynomial that stands for exp: an odd one is negative somewhere (`why` says where)."""
    def check(option, value):
        if not (_is_number(value, numbers.Integral) and value >= 2 and value % 2 == 0):
            _refuse(option, value, "a positive even integer", f"{why}, which can make the attention normaliser cross 0")
    return check


def unset_or(rule):
    """None (the kind picks the value itself) or a value `rule` accepts."""
    def check(option, value):
        if value is not None:
            rule(option, value)
    return check


@dataclasses.dataclass(frozen=True)
class Option:
    """An option a kind reads: its name, its default, the values it takes (`choices`, where they are few, else
    those `rule` accepts) and one line of help."""
    name: str
    default: object  # None: for direct construction only (the multi-head wrapper sets it), no config field
    help: str
    choices: tuple = ()
    rule: Callable[[str, object], None] | None = None

    def check(self, value) -> None:
        if self.choices and value not in self.choices:
            _refuse(self.name, value, "one of " + ", ".join(map(repr, self.choices)), "")
        if self.rule:
            self.rule(self.name, value)

    def narrowed(self, choices: tuple) -> "Option":
        """This option with fewer values, for a kind that has fewer (gated_linear's one path): its help, shared
        by every kind that reads it, says which."""
        if not set(choices) <= set(self.choices) or self.default not in choices:
            raise ValueError(f"option {self.name!r} narrowed to {choices}: they must be among {self.choices} and "
                             f"hold its default {self.default!r}")
        return dataclasses.replace(self, choices=choices)
