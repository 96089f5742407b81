"""The attention of the model a config selects: the roles it has, the kind of each role, the options of the
kinds in use and the Transformer's spec. The tasks build their models from these and training/validate.py
checks the config against them, so both read the config the same way."""
import attention
from models import rnn
from models.transformer import ROLES, TransformerSpec

MODELS = ("transformer", "rnn")  # translation's model.name
# The roles of each task's Transformer (recall's depend on its form, see model_roles).
_TASK_ROLES = {"translation": ROLES, "mlm": ("encoder_self",), "listops": ("encoder_self",)}
_RNN_ROLES = ("cross",)  # the RNN attends from decoder states to encoder states only


def is_rnn(config) -> bool:
    return config.task == "translation" and config.model.name == "rnn"


def model_roles(config) -> tuple[str, ...]:
    if config.task == "recall":  # a causal language model, or an encoder
        return ("decoder_self",) if config.dataset.form == "causal" else ("encoder_self",)
    return _RNN_ROLES if is_rnn(config) else _TASK_ROLES[config.task]


def role_kinds(config) -> dict[str, str]:
    """The attention kind of each role of the task's model: the role's override, else `attention.name`."""
    return {role: config.attention[role] or config.attention.name for role in model_roles(config)}


def allowed_kinds(config) -> list[str]:
    return attention.names() + ([rnn.NO_ATTENTION] if is_rnn(config) else [])


def kind_options(config) -> dict[str, dict]:
    """Options for each kind in use, taken from `config.attention.*`."""
    candidates = {key: value for key, value in config.attention.items() if key not in ("name", *ROLES)}
    return {kind: attention.select_options(kind, candidates) for kind in set(role_kinds(config).values())
            if kind != rnn.NO_ATTENTION}


def transformer_spec(config, max_len: int) -> TransformerSpec:
    """The Transformer of `config.model` with the attention of `config.attention`, positions up to max_len."""
    model = config.model
    return TransformerSpec(
        num_layers=model.num_layers, d_model=model.d_model, num_heads=model.num_heads, mlp_dim=model.mlp_dim,
        dropout_rate=model.dropout_rate, max_len=max_len, positions=model.positions,
        tied_embeddings=model.get("tied_embeddings", True),  # a classifier has its own output layer
        qk_head_dim=model.qk_head_dim, conv_kernel=model.conv_kernel,
        attention=role_kinds(config), attention_options=kind_options(config))
