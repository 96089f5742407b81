"""Attention kinds by name: `create`, `names`, `register`, and the options each kind accepts, with defaults."""
import inspect

_KINDS: dict[str, type] = {}
# Constructor arguments every kind receives from the multi-head wrapper; the rest are kind options.
_COMMON_ARGS = ("num_heads", "head_dim", "rngs")


def register(name: str):
    """Class decorator that makes a kind available to `create` under `name`."""

    def add(cls):
        if name in _KINDS:
            raise ValueError(f"attention kind {name!r} is registered twice")
        _KINDS[name] = cls
        return cls

    return add


def names() -> list[str]:
    return sorted(_KINDS)


def get(name: str) -> type:
    if name not in _KINDS:
        raise ValueError(f"unknown attention kind {name!r}; known kinds: {', '.join(names())}")
    return _KINDS[name]


def options(name: str) -> tuple[str, ...]:
    """Names of the options `name` accepts (its keyword arguments beyond the common ones)."""
    parameters = inspect.signature(get(name).__init__).parameters
    return tuple(p for p in parameters if p not in ("self", *_COMMON_ARGS))


def all_options() -> set[str]:
    return {option for name in _KINDS for option in options(name)}


def option_defaults() -> dict:
    """Every kind option at its constructor's default, the one source of the configs' `attention.*` values.

    An option means one thing wherever it appears, so kinds sharing a name must share its default. One
    defaulting to None (additive's query_dim, key_dim) is for direct construction only: the multi-head
    wrapper sets those widths itself, so no config carries it."""
    defaults, first_kind = {}, {}
    for name in names():
        for option, parameter in inspect.signature(get(name).__init__).parameters.items():
            if option not in options(name) or parameter.default is None:
                continue
            if parameter.default is inspect.Parameter.empty:
                raise TypeError(f"attention kind {name!r}: option {option!r} has no default")
            first_kind.setdefault(option, name)
            if defaults.setdefault(option, parameter.default) != parameter.default:
                raise ValueError(f"option {option!r} defaults to {defaults[option]!r} in kind "
                                 f"{first_kind[option]!r} but to {parameter.default!r} in {name!r}; an option "
                                 f"has one default")
    return dict(sorted(defaults.items()))


def select_options(name: str, candidates: dict) -> dict:
    """The subset of `candidates` (e.g. every `config.attention.*` option) that kind `name` takes."""
    accepted = options(name)
    return {key: value for key, value in candidates.items() if key in accepted}


def create(name: str, *, num_heads: int, head_dim: int, rngs, **kind_options):
    cls = get(name)
    unknown = set(kind_options) - set(options(name))
    if unknown:
        raise ValueError(
            f"attention kind {name!r} takes no option {sorted(unknown)}; "
            f"it takes: {', '.join(options(name)) or 'none'}"
        )
    return cls(num_heads=num_heads, head_dim=head_dim, rngs=rngs, **kind_options)
