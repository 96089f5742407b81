"""Attention kinds by name: `create`, `names`, `register`, and the options each kind reads, with defaults.

A kind's options are its base's `BASE_OPTIONS` followed by its `OWN_OPTIONS` (attention/option_specs.py), an
own option of a base option's name taking its place (a narrowed one); a kind built of other kinds (based)
declares them all as its own. Both are class attributes, so a subclass that declares none reads its parent's."""
from attention.option_specs import Option

_KINDS: dict[str, type] = {}
# Option names no kind reads any more -> the options that replaced them. A config or a `create` that names one is
# refused, naming its successors: which one it meant depends on the kind, so none is read in its place.
RETIRED = {"implementation": ("softmax_implementation", "kernelized_implementation")}


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


def options_of(name: str) -> dict[str, Option]:
    """The options kind `name` reads, by name: its base's, then its own."""
    cls = get(name)
    return {option.name: option for option in (*getattr(cls, "BASE_OPTIONS", ()), *getattr(cls, "OWN_OPTIONS", ()))}


def options(name: str) -> tuple[str, ...]:
    """Names of the options `name` reads: its base's, then its own."""
    return tuple(options_of(name))


def all_options() -> set[str]:
    return {option for name in _KINDS for option in options(name)}


def readers(option: str) -> list[str]:
    """The kinds that read `option`."""
    return [name for name in names() if option in options(name)]


def option_defaults() -> dict:
    """Every kind option at its declared default, the one source of the configs' `attention.*` values.

    An option means one thing wherever it appears, so kinds sharing a name must share its default. One
    defaulting to None (additive's query_dim, key_dim) is for direct construction only: the multi-head
    wrapper sets those widths itself, so no config carries it."""
    defaults, first_kind = {}, {}
    for name in names():
        for option in options_of(name).values():
            if option.default is None:
                continue
            first_kind.setdefault(option.name, name)
            if defaults.setdefault(option.name, option.default) != option.default:
                raise ValueError(f"option {option.name!r} defaults to {defaults[option.name]!r} in kind "
                                 f"{first_kind[option.name]!r} but to {option.default!r} in {name!r}; an option "
                                 f"has one default")
    return dict(sorted(defaults.items()))


def replacement(option: str) -> str | None:
    """The options that replaced `option`, a name no kind reads any more, with their values and readers; None
    for any other name."""
    if option not in RETIRED:
        return None
    successors = []
    for successor in RETIRED[option]:
        kinds = readers(successor)
        choices = dict.fromkeys(value for kind in kinds for value in options_of(kind)[successor].choices)
        successors.append(f"{successor} ({', '.join(choices)}; read by {', '.join(kinds)})")
    return " and ".join(successors)


def select_options(name: str, candidates: dict) -> dict:
    """The subset of `candidates` (e.g. every `config.attention.*` option) that kind `name` takes."""
    accepted = options(name)
    return {key: value for key, value in candidates.items() if key in accepted}


def check_options(name: str, values: dict) -> None:
    """Each value of `values` by kind `name`'s declaration of its option: ValueError for one it does not read
    (a retired name says its successors) or a value it refuses."""
    declared = options_of(name)
    for option in values:
        if successors := replacement(option):
            raise ValueError(f"attention option {option!r} is replaced by {successors}")
    if unknown := sorted(set(values) - set(declared)):
        raise ValueError(f"attention kind {name!r} takes no option {unknown}; it takes: "
                         f"{', '.join(declared) or 'none'}")
    for option, value in values.items():
        declared[option].check(value)


def create(name: str, *, num_heads: int, head_dim: int, rngs, d_model: int | None = None, **kind_options):
    """Kind `name` with `kind_options`; a kind that reads the layer's input (`reads_inputs`: its gates are
    projections of x) also takes the model's width `d_model`, which the others ignore."""
    check_options(name, kind_options)
    cls = get(name)
    if not getattr(cls, "reads_inputs", False):
        return cls(num_heads=num_heads, head_dim=head_dim, rngs=rngs, **kind_options)
    if d_model is None:
        raise ValueError(f"attention kind {name!r} reads the layer's input x: create it with d_model, x's width")
    return cls(num_heads=num_heads, head_dim=head_dim, d_model=d_model, rngs=rngs, **kind_options)
