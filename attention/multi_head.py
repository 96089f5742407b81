"""Multi-head attention: owns the Q/K/V/output projections and delegates to any registered kind."""
import jax.numpy as jnp
from flax import nnx

from attention import registry

SELF_DECODING_METHODS = ("init_cache", "decode_step")
CROSS_DECODING_METHODS = ("init_memory", "attend_memory")


class MultiHeadAttention(nnx.Module):
    """Projections of the inputs to `num_heads` heads, any registered kind over them, and the output
    projection. Values have d_model / num_heads features per head; queries and keys have `qk_head_dim`
    (None: the same), so that a kernelised kind's feature map acts on a width d' of its own (Based's
    design): its feature dimension, hence its rank bound and state, can be swept at a fixed model width."""

    def __init__(self, kind: str, *, d_model: int, num_heads: int, rngs: nnx.Rngs,
                 kind_options: dict | None = None, qk_head_dim: int | None = None):
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads  # of the values
        self.qk_head_dim = qk_head_dim or self.head_dim
        self.query = nnx.Linear(d_model, num_heads * self.qk_head_dim, rngs=rngs)
        self.key = nnx.Linear(d_model, num_heads * self.qk_head_dim, rngs=rngs)
        self.value = nnx.Linear(d_model, d_model, rngs=rngs)
        self.output = nnx.Linear(d_model, d_model, rngs=rngs)
        self.attention = registry.create(kind, num_heads=num_heads, head_dim=self.qk_head_dim, rngs=rngs,
                                         d_model=d_model, **(kind_options or {}))
        self.kind = kind
        # A kind whose gates are projections of the layer's input (attention/input_gated.py) also takes it.
        self.reads_inputs = getattr(self.attention, "reads_inputs", False)
        # When set, each call also sows its explicit [B, H, Lq, Lk] weights (for rank analysis).
        self.capture_weights = False

    @property
    def feature_dim(self):
        return self.attention.feature_dim

    @property
    def rank_bound(self):
        """The bound on the rank of the kind's weights without a causal mask: its feature_dim where that bounds
        it (feature_dim_bounds_rank), else None."""
        return self.attention.feature_dim if self.attention.feature_dim_bounds_rank else None

    def state_size(self, seq_len: int, causal: bool) -> int:
        """Numbers one head keeps to attend over `seq_len` positions (see the kinds' `state_size`)."""
        return self.attention.state_size(self.qk_head_dim, self.head_dim, seq_len, causal)

    def _heads(self, x):
        return x.reshape(x.shape[:-1] + (self.num_heads, -1))

    def _side_input(self, inputs):
        """The keyword that passes the layer's input to a kind that reads it; none for the others."""
        return {"inputs": inputs} if self.reads_inputs else {}

    def __call__(self, inputs_q, inputs_kv, mask=None, *, causal=False):
        q = self._heads(self.query(inputs_q))
        k = self._heads(self.key(inputs_kv))
        v = self._heads(self.value(inputs_kv))
        side = self._side_input(inputs_kv)  # a kind that reads it attends within one sequence: inputs_kv is inputs_q
        if self.capture_weights:
            self.sow(nnx.Intermediate, "attention_weights", self.attention.weights(q, k, mask, causal=causal, **side))
        return self._merge(self.attention(q, k, v, mask, causal=causal, **side))

    def _merge(self, out):
        return self.output(out.reshape(out.shape[:-2] + (-1,)))

    # --- incremental decoding (interface in attention/__init__.py): inputs [B, 1, d_model] -----------

    def _decoding_kind(self, methods=SELF_DECODING_METHODS):
        missing = [name for name in methods if not hasattr(self.attention, name)]
        if missing:
            raise NotImplementedError(
                f"attention kind {self.kind!r} cannot decode incrementally: it lacks {', '.join(missing)} "
                f"(the kinds built on ScoreAttention or KernelizedAttention have them; the input-gated ones "
                f"attend within one sequence, not across)")
        return self.attention

    def init_cache(self, batch: int, max_len: int, dtype=jnp.float32):
        """The empty cache of a causal self-attention decoding up to `max_len` positions."""
        return self._decoding_kind().init_cache(batch, max_len, self.num_heads, self.qk_head_dim, self.head_dim,
                                                dtype)

    def decode_step(self, inputs, cache, index, max_len: int, valid):
        """Causal self-attention of the input at position `index` ([B, 1, d_model]; valid [B] False
        for a padding token, which later positions then ignore) -> (output [B, 1, d_model], cache)."""
        q, k, v = (self._heads(projection(inputs)) for projection in (self.query, self.key, self.value))
        out, cache = self._decoding_kind().decode_step(q, k, v, cache, index, max_len, valid,
                                                       **self._side_input(inputs))
        return self._merge(out), cache

    def init_memory(self, inputs_kv, key_mask, max_len: int):
        """Projects the attended sequence [B, Lk, d_model] once (key_mask [B, Lk]) for `attend_memory`."""
        k, v = self._heads(self.key(inputs_kv)), self._heads(self.value(inputs_kv))
        return self._decoding_kind(CROSS_DECODING_METHODS).init_memory(k, v, key_mask, max_len)

    def attend_memory(self, inputs_q, memory, key_mask, index, max_len: int):
        """Cross-attention of the query at position `index` of a `max_len`-position decoder -> (output,
        memory), the memory updated where the kind's weights depend on the earlier steps."""
        q = self._heads(self.query(inputs_q))
        out, memory = self._decoding_kind(CROSS_DECODING_METHODS).attend_memory(q, memory, key_mask, index, max_len)
        return self._merge(out), memory
