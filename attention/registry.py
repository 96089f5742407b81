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


def _takes_base_options(cls: type) -> bool:
    parameters = inspect.signature(cls.__init__).parameters.values()
    return any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters)


def _option_parameters(cls: type) -> list[inspect.Parameter]:
    """The options of kind class `cls`: its base options where its constructor passes **base_options on, then
    the keyword arguments it names beyond the common ones.

    Base options are declared once, as the keyword arguments of the constructor of the kind's family base:
    the first class up its MRO whose constructor takes no **base_options (ScoreAttention: dropout_rate;
    KernelizedAttention: eps, chunk_size, implementation). A class in between adds none of its own: local, on
    SoftmaxAttention, takes no implementation. A kind built of other kinds (based) takes no **base_options: it
    names each option it passes on."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    own = [parameter for parameter in parameters if parameter.name not in ("self", *_COMMON_ARGS)
           and parameter.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)]
    if not _takes_base_options(cls):
        return own
    base = next((base for base in cls.__mro__[1:] if not _takes_base_options(base)), None)
    if base is None:
        raise TypeError(f"{cls.__name__} takes **base_options but no class above it declares them")
    return _option_parameters(base) + own


def options(name: str) -> tuple[str, ...]:
    """Names of the options `name` accepts: its base options, then its own keyword arguments."""
    return tuple(parameter.name for parameter in _option_parameters(get(name)))


def all_options() -> set[str]:
    return {option for name in _KINDS for option in options(name)}


def option_defaults() -> dict:
    """Every kind option at its constructor's default, the one source of the configs' `attention.*` values.

    An option means one thing wherever it appears, so kinds sharing a name must share its default. One
    defaulting to None (additive's query_dim, key_dim) is for direct construction only: the multi-head
    wrapper sets those widths itself, so no config carries it."""
    defaults, first_kind = {}, {}
    for name in names():
        for parameter in _option_parameters(get(name)):
            option = parameter.name
            if parameter.default is None:
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
