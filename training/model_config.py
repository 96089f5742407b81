"""The attention a config gives a model's roles: the kind of each role, the options of the kinds in use and the
Transformer's spec. A task names its model's roles (tasks/interface.py); the tasks build their models from
these and training/validate.py checks the config against them, so both read the config the same way."""
import attention
from models.transformer import ROLES, TransformerSpec


def registered_kinds(config) -> list[str]:
    """The kinds a Transformer's roles may take: every registered kind."""
    del config
    return attention.names()


def role_kinds(config, roles: tuple[str, ...]) -> dict[str, str]:
    """The attention kind of each of `roles`: the role's override, else `attention.name`."""
    return {role: config.attention[role] or config.attention.name for role in roles}


def kind_options(config, roles: tuple[str, ...]) -> dict[str, dict]:
    """Options for each registered kind in use, taken from `config.attention.*` (a model's own name for
    attending to nothing, the RNN's "none", has none)."""
    candidates = {key: value for key, value in config.attention.items() if key not in ("name", *ROLES)}
    return {kind: attention.select_options(kind, candidates) for kind in set(role_kinds(config, roles).values())
            if kind in attention.names()}


def transformer_spec(config, max_len: int, roles: tuple[str, ...]) -> TransformerSpec:
    """The Transformer of `config.model` with the attention of `config.attention` in `roles`, positions up
    to max_len."""
    model = config.model
    return TransformerSpec(
        num_layers=model.num_layers, d_model=model.d_model, num_heads=model.num_heads, mlp_dim=model.mlp_dim,
        dropout_rate=model.dropout_rate, max_len=max_len, positions=model.positions,
        tied_embeddings=model.get("tied_embeddings", True),  # a classifier has its own output layer
        qk_head_dim=model.qk_head_dim, conv_kernel=model.conv_kernel,
        attention=role_kinds(config, roles), attention_options=kind_options(config, roles))
