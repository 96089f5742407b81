"""Multi-head attention: owns the Q/K/V/output projections and delegates to any registered kind."""
from flax import nnx

from attention import registry


class MultiHeadAttention(nnx.Module):
    def __init__(self, kind: str, *, d_model: int, num_heads: int, rngs: nnx.Rngs,
                 kind_options: dict | None = None):
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.query = nnx.Linear(d_model, d_model, rngs=rngs)
        self.key = nnx.Linear(d_model, d_model, rngs=rngs)
        self.value = nnx.Linear(d_model, d_model, rngs=rngs)
        self.output = nnx.Linear(d_model, d_model, rngs=rngs)
        self.attention = registry.create(kind, num_heads=num_heads, head_dim=self.head_dim, rngs=rngs,
                                         **(kind_options or {}))
        self.kind = kind
        # When set, each call also sows its explicit [B, H, Lq, Lk] weights (for rank analysis).
        self.capture_weights = False

    @property
    def feature_dim(self):
        return self.attention.feature_dim

    def _heads(self, x):
        return x.reshape(x.shape[:-1] + (self.num_heads, self.head_dim))

    def __call__(self, inputs_q, inputs_kv, mask=None, *, causal=False):
        q = self._heads(self.query(inputs_q))
        k = self._heads(self.key(inputs_kv))
        v = self._heads(self.value(inputs_kv))
        if self.capture_weights:
            self.sow(nnx.Intermediate, "attention_weights", self.attention.weights(q, k, mask, causal=causal))
        out = self.attention(q, k, v, mask, causal=causal)
        return self.output(out.reshape(out.shape[:-2] + (-1,)))
