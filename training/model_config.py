"""The attention a config gives a model's roles: the kind of each role, the options of the kinds in use and the
Transformer's spec. A task names its model's roles (tasks/interface.py); the tasks build their models from
these and training/validate.py checks the config against them, so both read the config the same way."""
import attention
from attention import registry
from models.transformer import ROLES, SELF_ROLES, TransformerSpec
from training.config_checks import ConfigError


def registered_kinds(config) -> list[str]:
    """The kinds a Transformer's roles may take: every registered kind."""
    del config
    return attention.names()


def layer_kinds(config) -> tuple[str, ...]:
    """config.model.layer_kinds as a tuple, one kind per layer; () where every layer takes its role's kind."""
    text = config.model.get("layer_kinds", "")
    return tuple(kind.strip() for kind in text.split(",")) if text else ()


def _role_kind(config, role: str) -> str:
    """The role's override, else attention.name."""
    return config.attention[role] or config.attention.name


def kinds_in_use(config, roles: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Each of `roles` -> the kinds its layers take: layer_kinds in a self-attention role where they are set,
    else its own kind alone."""
    layers = layer_kinds(config)
    return {role: layers if layers and role in SELF_ROLES else (_role_kind(config, role),) for role in roles}


def every_kind(config, roles: tuple[str, ...]) -> set[str]:
    """The kinds any layer of `roles` takes."""
    return {kind for kinds in kinds_in_use(config, roles).values() for kind in kinds}


def role_kinds(config, roles: tuple[str, ...]) -> dict[str, str]:
    """The attention kind of each of `roles` as eval.json names it: its kind, or where model.layer_kinds sets
    its layers' kinds, those joined by commas as written ("local,taylor": a name, not a registered kind)."""
    return {role: ",".join(kinds) for role, kinds in kinds_in_use(config, roles).items()}


def kind_field(config, role: str) -> str:
    """The field that sets `role`'s kind: model.layer_kinds in a self-attention role where it is set, else
    attention.<role> where that is set, else attention.name."""
    if layer_kinds(config) and role in SELF_ROLES:
        return "model.layer_kinds"
    return f"attention.{role}" if config.attention[role] else "attention.name"


def check_incremental(config, roles: tuple[str, ...], need: str) -> None:
    """Refuses in `roles`, which `need` it (attend causally, are decoded one position at a time), a kind that
    is not incremental (attention/score_base.py): it would raise only once the model runs."""
    for role, kinds in kinds_in_use(config, roles).items():
        field = kind_field(config, role)
        remedy = field if field == "model.layer_kinds" else f"attention.{role}"  # the role alone, not every role
        for kind in kinds:
            if kind in attention.names() and not registry.get(kind).incremental:
                raise ConfigError(f"config.{field}={','.join(kinds)!r}: the {role} role {need}, "
                                  f"and kind {kind!r} cannot: a row of its weights depends on the later queries; "
                                  f"give {remedy} another kind")


def check_within_one_sequence(config, roles: tuple[str, ...]) -> None:
    """Refuses in `roles`, which attend across two sequences (cross-attention), a kind that reads the layer's input
    for its gates (attention/input_gated.py): its gates and output gate are read from one sequence's input."""
    for role, kinds in kinds_in_use(config, roles).items():
        for kind in kinds:
            if kind in attention.names() and getattr(registry.get(kind), "reads_inputs", False):
                raise ConfigError(f"config.{kind_field(config, role)}={kind!r}: the {role} role attends across two "
                                  f"sequences, and kind {kind!r} reads its gates from one sequence's input (a "
                                  f"self-attention kind); give attention.{role} another kind")


def unread_fields(config, task) -> list[str]:
    """The dotted fields of `config` that neither its task's model nor its kinds in use read: the attention options
    no kind in use takes, and the fields the task names as unread by the model it builds (`unread_fields` of its
    module, where it has one: translation's RNN leaves the Transformer's fields, and the reverse)."""
    read = set().union(*kind_options(config, task.roles(config)).values())
    unread = [f"attention.{option}" for option in config.attention if option not in (*read, "name", *ROLES)]
    return unread + list(getattr(task, "unread_fields", lambda config: ())(config))


def kind_options(config, roles: tuple[str, ...]) -> dict[str, dict]:
    """Options for each registered kind in use, taken from `config.attention.*` (a model's own name for
    attending to nothing, the RNN's "none", has none)."""
    candidates = {key: value for key, value in config.attention.items() if key not in ("name", *ROLES)}
    return {kind: attention.select_options(kind, candidates) for kind in every_kind(config, roles)
            if kind in attention.names()}


def transformer_spec(config, max_len: int, roles: tuple[str, ...]) -> TransformerSpec:
    """The Transformer of `config.model` with the attention of `config.attention` in `roles`, positions up
    to max_len."""
    model = config.model
    return TransformerSpec(
        num_layers=model.num_layers, d_model=model.d_model, num_heads=model.num_heads, mlp_dim=model.mlp_dim,
        dropout_rate=model.dropout_rate, max_len=max_len, positions=model.positions,
        tied_embeddings=model.get("tied_embeddings", True),  # a classifier has its own output layer
        qk_head_dim=model.qk_head_dim, conv_kernel=model.conv_kernel, conv_centered=model.conv_centered,
        attention={role: _role_kind(config, role) for role in roles},
        layer_kinds=layer_kinds(config), attention_options=kind_options(config, roles))
