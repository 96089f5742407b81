"""Based's hybrid in one layer: Taylor linear attention, which sees every allowed key through a fixed state,
beside exact softmax attention over a sliding window of the nearest keys, their outputs averaged."""
import jax.numpy as jnp
from flax import nnx

from attention.kernelized_base import CHUNK_SIZE, EPS, KERNELIZED_IMPLEMENTATION
from attention.kernelized_kinds import TAYLOR_ORDER, TaylorAttention
from attention.local import WINDOW, LocalAttention
from attention.registry import register


def _mean(taylor_out, local_out):
    return (taylor_out + local_out) / 2


@register("based")
class BasedAttention(nnx.Module):
    """Based (Arora et al., *Simple linear attention language models balance the recall-throughput
    tradeoff*, 2024): the `taylor` kind (exp(q.k / sqrt d) as its Taylor series to `taylor_order`, C(d + p, p)
    features) and the `local` kind (softmax over the keys within `window` of the query: causally the `window`
    keys before it and itself), each built from its own class, their outputs averaged.

    Why the mean: Based stacks its two mixers as separate layers, but the lab picks one kind per attention
    role, so one layer holds both. Averaging keeps the layer an attention o = A v with
    A = (A_taylor + A_local) / 2, a convex mix of two matrices whose rows sum to 1 over the allowed keys, so
    its rows do too (up to Taylor's eps), and the rank and entropy analyses read it as any other kind's. Where a
    window holds no allowed key (a padded query's; a cross-attention query aligned past its source's last key),
    local's row is 0 and the row is Taylor's half alone; every unpadded self-attention query has its own key.

    Options: `window` reaches the local part; `taylor_order` and the kernelised options `eps`, `chunk_size`
    and `kernelized_implementation` (attention/ops/kernel_sums.py's paths) reach the Taylor part. It is on no base:
    it declares them all as its own, its parts' declarations (registry.option_defaults refuses a second default
    for an option); the local part keeps its softmax at the default and no dropout.

    A mask is a key-padding one, as for any kernelised kind (attention/masks.py, key_padding). Decoding keeps
    both parts' caches (Taylor's state S, local's keys and values) and memories side by side.

    `feature_dim` is Taylor's m, but no bound on the rank: phi(Q) phi(K)^T is of rank <= m, the window's band
    matrix is of full rank (causally, triangular with a positive diagonal), and their sum in general is too
    (tests/test_hybrid.py finds it above m). Its weights are
    no softmax of scores (keeps_every_key False): the log of the mix reads no score.
    """

    OWN_OPTIONS = (WINDOW, TAYLOR_ORDER, EPS, CHUNK_SIZE, KERNELIZED_IMPLEMENTATION)
    feature_dim_bounds_rank = False  # the window's band matrix lifts it (see above)
    incremental = True  # both parts' rows depend on the queries up to theirs alone
    keeps_every_key = False  # a mix of two matrices, not a softmax of scores (see above)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, window: int = 3, taylor_order: int = 2,
                 eps: float = 1e-6, chunk_size: int = 64, kernelized_implementation: str = "auto"):
        self.taylor = TaylorAttention(num_heads=num_heads, head_dim=head_dim, rngs=rngs, taylor_order=taylor_order,
                                      eps=eps, chunk_size=chunk_size,
                                      kernelized_implementation=kernelized_implementation)
        self.local = LocalAttention(num_heads=num_heads, head_dim=head_dim, rngs=rngs, window=window)
        self.feature_dim = self.taylor.feature_dim

    def weights(self, q, k, mask=None, *, causal=False):
        return _mean(self.taylor.weights(q, k, mask, causal=causal), self.local.weights(q, k, mask, causal=causal))

    def __call__(self, q, k, v, mask=None, *, causal=False):
        return _mean(self.taylor(q, k, v, mask, causal=causal), self.local(q, k, v, mask, causal=causal))

    def state_size(self, key_dim: int, value_dim: int, seq_len: int, causal: bool) -> int:
        """Taylor's m x Dv state plus the window's keys and values ((window + 1) x (Dk + Dv) causally, twice
        the window and one more bidirectionally, at most the length): what one head needs to attend. Its
        decoding cache holds more, the local kind's buffer of every position (ScoreAttention.init_cache)."""
        return (self.taylor.state_size(key_dim, value_dim, seq_len, causal)
                + self.local.state_size(key_dim, value_dim, seq_len, causal))

    # --- incremental decoding (interface in attention/__init__.py): each part's cache or memory --------

    def init_cache(self, batch: int, max_len: int, num_heads: int, key_dim: int, value_dim: int,
                   dtype=jnp.float32):
        sizes = (batch, max_len, num_heads, key_dim, value_dim, dtype)
        return {"taylor": self.taylor.init_cache(*sizes), "local": self.local.init_cache(*sizes)}

    def decode_step(self, q, k, v, cache, index, max_len: int, key_valid):
        taylor_out, taylor_cache = self.taylor.decode_step(q, k, v, cache["taylor"], index, max_len, key_valid)
        local_out, local_cache = self.local.decode_step(q, k, v, cache["local"], index, max_len, key_valid)
        return _mean(taylor_out, local_out), {"taylor": taylor_cache, "local": local_cache}

    def init_memory(self, k, v, key_mask, max_len: int):
        return {"taylor": self.taylor.init_memory(k, v, key_mask, max_len),
                "local": self.local.init_memory(k, v, key_mask, max_len)}

    def attend_memory(self, q, memory, key_mask, index, max_len: int):
        taylor_out, taylor_memory = self.taylor.attend_memory(q, memory["taylor"], key_mask, index, max_len)
        local_out, local_memory = self.local.attend_memory(q, memory["local"], key_mask, index, max_len)
        return _mean(taylor_out, local_out), {"taylor": taylor_memory, "local": local_memory}
