"""The base of the kernelised kinds: a feature map phi in place of softmax's exp(q.k), the keys' stabiliser
and the normaliser's floor `eps` in its units, the O(L) forms of attention/ops/kernel_sums.py behind the
interface, and decoding through the running state sum phi(k) [v, 1]^T."""
import jax
import jax.numpy as jnp
from flax import nnx

from attention import masks, option_specs
from attention.ops import kernel_sums


# The stabiliser of a padded key: below any other, so it sets no scale, and finite, so that exp(it - itself)
# is 1 where no key is allowed yet, not NaN.
_NO_KEY = float(jnp.finfo(jnp.float32).min)


EPS = option_specs.Option(
    "eps", 1e-6, "added to the normaliser (delta, gated_delta: to the squared norm of each query and key, under the "
    "square root that normalises it; gla, deltanet, gated_deltanet: to the mean square of the output norm, and "
    "the last two's to the squared norms too)", rule=option_specs.positive("it keeps the normaliser away from 0"))
CHUNK_SIZE = option_specs.Option("chunk_size", 64, "causal chunk length; 0: the size attention/ops/chunking.py picks",
                                  rule=option_specs.at_least(0, "0: the size attention/ops/chunking.py picks"))
KERNELIZED_IMPLEMENTATION = option_specs.Option(
    "kernelized_implementation", "auto",
    "who computes the sums: `auto` (taylor and exp_limit with fewer keys than features: the explicit Lq x Lk "
    "polynomial of q.k, the same product without the features; else the causal Pallas kernels on a GPU where they "
    "apply, else `xla`), `xla` (the custom-VJP sums), `pallas` (off a GPU in interpret mode, for tests) or "
    "`autodiff` (XLA's autodiff of the chunked sums, kept as the yardstick), see attention/ops/kernel_sums.py; "
    "gated_linear, delta and gated_delta: `auto` or `autodiff`, their one path; based: its Taylor part's",
    choices=kernel_sums.IMPLEMENTATIONS)
# The option of a kind with one path, differentiated by XLA's autodiff (gated_linear, delta, gated_delta).
ONE_PATH_IMPLEMENTATION = KERNELIZED_IMPLEMENTATION.narrowed(("auto", "autodiff"))


class KernelizedAttention(nnx.Module):
    """Base of the linear kinds: a subclass sets `feature_dim` and defines `features(x)` for
    [B, L, H, d] inputs, or `row_features` where features depend on positions or carry a stabiliser.

    `eps` is the normaliser's floor in the kernel's own units: a feature map that scales its products
    down by exp(stabiliser) for numerical range has eps scaled down alike, so the stabiliser cancels.

    Decoding keeps S = sum_k phi(k) [v, 1]^T [B, H, m, Dv + 1] in place of the keys: a causal step adds
    its key's term, O(1) in the position; cross-attention sums the source keys once.

    `BASE_OPTIONS` are the options every kernelised kind reads (`eps`, `chunk_size`: the causal chunk length,
    0 for attention/ops/chunking.py's; `kernelized_implementation`, who computes the sums, see
    attention/ops/kernel_sums.py): a kind's constructor passes them on as **base_options, and declares its own in
    `OWN_OPTIONS` (attention/registry.py composes the two; a kind with one path narrows the implementation's
    values there)."""

    BASE_OPTIONS = (EPS, CHUNK_SIZE, KERNELIZED_IMPLEMENTATION)
    OWN_OPTIONS = ()

    feature_dim: int
    # phi(Q) phi(K)^T is of rank <= m without a causal mask: eval.json's rank bound. A kind whose weights are
    # that product times a decay matrix of full rank (gated_linear) sets it False; its m is the feature map's.
    feature_dim_bounds_rank = True
    incremental = True  # row i depends on the queries up to i alone: see ScoreAttention.incremental

    def __init__(self, *, eps: float = 1e-6, chunk_size: int = 64, kernelized_implementation: str = "auto"):
        self.eps = eps
        self.chunk_size = chunk_size
        self.implementation = kernelized_implementation

    def features(self, x):
        raise NotImplementedError

    def row_features(self, x, positions, max_len: int):
        """(phi(x), stabiliser) for the queries or keys x [B, L, H, d] at `positions` [L] of an attention
        whose longer side has `max_len` positions: phi(x) is scaled down by exp(stabiliser), a scalar or
        one per row [B, L, H, 1]."""
        return self.features(x), 0.0

    def _eps(self, stabiliser):
        """eps in the units of phi(q).phi(k), scaled down by exp(stabiliser) as they are, in float32 and
        unclipped, so that it cannot outweigh a normaliser it should not: where it underflows, it is
        negligible next to any normaliser above 2e-31 (2^24 times float32's smallest normal number); where
        it overflows to inf, the output is 0, and the exact one below 3e-39 times the number of keys of
        the values (stabilised features keep each phi(q).phi(k) <= 1, so the unscaled normaliser is below
        3e-39 eps per key)."""
        log_eps = jnp.log(jnp.float32(self.eps)) - jax.lax.stop_gradient(jnp.asarray(stabiliser, jnp.float32))
        return jnp.exp(log_eps)

    def _key_features(self, k, key_mask, max_len: int, causal: bool):
        """phi(k) with padded keys zeroed, in the units of the stabiliser returned: the kind's scalar, else
        the largest of the allowed keys' stabilisers [B, 1, H, 1], or causally their running max
        [B, Lk, H, 1], so that a query's units depend on no later key (as in decoding)."""
        phi_k, stabiliser = self.row_features(k, jnp.arange(k.shape[1]), max_len)
        if key_mask is not None:
            phi_k = phi_k * key_mask[:, :, None, None].astype(phi_k.dtype)
        if jnp.ndim(stabiliser) == 0:
            return phi_k, stabiliser
        # It cancels in the output: differentiating through it would only add terms that sum to 0.
        stabiliser = jax.lax.stop_gradient(stabiliser)
        if key_mask is not None:  # a padded key must not set the keys' scale
            stabiliser = jnp.where(key_mask[:, :, None, None], stabiliser, _NO_KEY)
        shared = jax.lax.cummax(stabiliser, axis=1) if causal else stabiliser.max(1, keepdims=True)
        # phi_k times its float32 factor (<= 1) is float32: not rounded a second time to the compute dtype.
        return phi_k * jnp.exp(stabiliser - shared), shared

    def _features_and_eps(self, q, k, mask, causal):
        key_mask = masks.key_padding(mask, k.shape[0], k.shape[1])
        max_len = max(q.shape[1], k.shape[1])
        phi_q, query_stabiliser = self.row_features(q, jnp.arange(q.shape[1]), max_len)
        phi_k, key_stabiliser = self._key_features(k, key_mask, max_len, causal)
        return phi_q, phi_k, key_stabiliser, self._eps(query_stabiliser + key_stabiliser)

    def weights(self, q, k, mask=None, *, causal=False):
        phi_q, phi_k, key_stabiliser, eps = self._features_and_eps(q, k, mask, causal)
        return kernel_sums.explicit_weights(phi_q, phi_k, eps, causal, key_stabiliser)

    def __call__(self, q, k, v, mask=None, *, causal=False):
        phi_q, phi_k, key_stabiliser, eps = self._features_and_eps(q, k, mask, causal)
        if causal:
            return kernel_sums.causal_linear_attention(phi_q, phi_k, v, eps, self.chunk_size, key_stabiliser,
                                                       self.implementation)
        return kernel_sums.bidirectional_linear_attention(phi_q, phi_k, v, eps, self.implementation)

    # --- incremental decoding (interface in attention/__init__.py) ------------------------------------

    def _attend(self, q, index, max_len: int, state, key_stabiliser):
        phi_q, query_stabiliser = self.row_features(q, jnp.atleast_1d(index), max_len)
        # In q's dtype, the compute dtype: a cache or memory holds no values to take it from.
        return kernel_sums.attend_state(phi_q, state, self._eps(query_stabiliser + key_stabiliser)).astype(q.dtype)

    def state_size(self, key_dim: int, value_dim: int, seq_len: int, causal: bool) -> int:
        """m x Dv numbers per head, S = sum phi(k) v^T (its normaliser column aside), at any length:
        the fixed state that bounds what the kind can recall."""
        return self.feature_dim * value_dim

    def init_cache(self, batch: int, max_len: int, num_heads: int, key_dim: int, value_dim: int,
                   dtype=jnp.float32):
        """S [B, H, m, Dv + 1] and the keys' running stabiliser [B, 1, H, 1] (-inf: no key yet), both
        float32 whatever the compute `dtype`: S gains a term per step, which a bfloat16 sum of hundreds
        of terms would round away."""
        return {"state": jnp.zeros((batch, num_heads, self.feature_dim, value_dim + 1), jnp.float32),
                "stabiliser": jnp.full((batch, 1, num_heads, 1), -jnp.inf, jnp.float32)}

    def decode_step(self, q, k, v, cache, index, max_len: int, key_valid):
        """Causal self-attention of position `index` (q, k, v [B, 1, H, D], key_valid [B]): S gains
        phi(k) [v, 1]^T. The stabiliser is the running max of the keys' ones: when it grows, S (held in
        its units) is rescaled by exp(old - new), so the output is the full causal computation's."""
        phi_k, key_stabiliser = self.row_features(k, jnp.atleast_1d(index), max_len)
        # A padding key sets no scale, as in the full computation.
        key_stabiliser = jnp.where(key_valid[:, None, None, None], key_stabiliser, _NO_KEY)
        stabiliser = jnp.maximum(cache["stabiliser"], key_stabiliser)
        weight = key_valid[:, None, None, None] * jnp.exp(key_stabiliser - stabiliser)
        rescale = jnp.exp(cache["stabiliser"] - stabiliser)[:, 0, :, :, None]  # [B, H, 1, 1]
        # phi_k times its float32 weight is float32: the new term is not rounded to the compute dtype.
        state = cache["state"] * rescale + kernel_sums.key_state(phi_k * weight, v)
        cache = {"state": state, "stabiliser": stabiliser}
        return self._attend(q, index, max_len, state, stabiliser), cache

    def init_memory(self, k, v, key_mask, max_len: int):
        """The bidirectional S over every allowed key [B, Lk] (cross-attention over the source)."""
        phi_k, stabiliser = self._key_features(k, key_mask, max(max_len, k.shape[1]), causal=False)
        batch, _, heads, _ = k.shape
        return {"state": kernel_sums.key_state(phi_k, v),
                "stabiliser": jnp.broadcast_to(jnp.asarray(stabiliser, jnp.float32), (batch, 1, heads, 1))}

    def attend_memory(self, q, memory, key_mask, index, max_len: int):
        out = self._attend(q, index, max(max_len, key_mask.shape[1]), memory["state"], memory["stabiliser"])
        return out, memory
