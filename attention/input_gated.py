"""The gated kinds as GLA, DeltaNet and Gated DeltaNet build them: gates computed from the layer's input x by
projections of their own, an output norm (and gate), over the sums of attention/ops/kernel_sums.py and
attention/ops/delta_sums.py.

The key-gated kinds beside them (`gated_linear`, `delta`, `gated_delta`) see only q, k and v and read their gates
from the d'-wide key (attention/key_gates.py). These read x [B, L, d_model], the self-attention's input: a kind
with `reads_inputs` takes `d_model` at construction and `inputs=x` in `__call__`, `weights` and `decode_step`
(MultiHeadAttention passes both). They attend within one sequence, so cross-attention is refused
(training/model_config.py); their gates live on the keys' axis, padded keys neutral (gate 1, write 0).

What the field's layers add and these leave out: the short causal convolutions on q, k and v (fla's
`use_short_conv`) and the SiLU on q and k; the model's own `model.conv_kernel` is the lab's convolution.
`weights` is the core's A of o = A v, before the output norm and gate (rows of any sum and sign; full rank in
general under decay or the delta rule's triangular system, so `feature_dim_bounds_rank` is False).
"""
import math

import jax
import jax.numpy as jnp
from flax import nnx

from attention import feature_maps, key_gates, masks, option_specs
from attention.ops import delta_sums, kernel_sums
from attention.kernelized_base import CHUNK_SIZE, EPS
from attention.registry import register

# Mamba2's initialisation of the decay, spread over heads: A ~ U[1, 16], dt log-uniform in [1e-3, 1e-1].
A_RANGE = (1.0, 16.0)
DT_RANGE = (1e-3, 1e-1)
OUTPUT_NORM = option_specs.Option(
    "output_norm", True, "gla, deltanet, gated_deltanet: the RMS norm (and output gate) after the state, as fla builds "
    "them; False: o_t as the state gives it, no norm or gate (an ablation)", choices=(True, False))


class InputGatedAttention(nnx.Module):
    """Base of the kinds whose gates are read from the layer's input (see the module's docstring). A subclass sets
    `feature_dim` and `output_norm` (an OutputNorm) and defines `_core(q, k, v, inputs, key_mask, causal)` (the
    float32 output before the norm), `weights` and `_step(state, q, k, v, inputs, key_mask)` (one causal position:
    (output before the norm, state))."""

    BASE_OPTIONS = (EPS, CHUNK_SIZE, OUTPUT_NORM)
    OWN_OPTIONS = ()
    reads_inputs = True
    incremental = True
    feature_dim_bounds_rank = False
    feature_dim: int

    def __init__(self, *, eps: float = 1e-6, chunk_size: int = 64, output_norm: bool = True):
        self.eps = eps
        self.chunk_size = chunk_size
        self.normalised = output_norm

    def _norm(self, num_heads: int, d_model: int, gated: bool, rngs: nnx.Rngs):
        """The OutputNorm, or None without one (no parameters that nothing would train)."""
        if not self.normalised:
            return None
        return OutputNorm(num_heads=num_heads, d_model=d_model, eps=self.eps, gated=gated, rngs=rngs)

    def _output(self, out, inputs):
        return self.output_norm(out, inputs) if self.normalised else out

    def __call__(self, q, k, v, mask=None, *, causal=False, inputs):
        key_mask = masks.key_padding(mask, k.shape[0], k.shape[1])
        return self._output(self._core(q, k, v, inputs, key_mask, causal), inputs).astype(v.dtype)

    def state_size(self, key_dim: int, value_dim: int, seq_len: int, causal: bool) -> int:
        """d x Dv numbers per head, the state S, at any length."""
        return self.feature_dim * value_dim

    def init_cache(self, batch: int, max_len: int, num_heads: int, key_dim: int, value_dim: int,
                   dtype=jnp.float32):
        """S [B, H, d, Dv] in float32 whatever the compute dtype (see KernelizedAttention.init_cache)."""
        return {"state": jnp.zeros((batch, num_heads, self.feature_dim, value_dim), jnp.float32)}

    def decode_step(self, q, k, v, cache, index, max_len: int, key_valid, *, inputs):
        out, state = self._step(cache["state"], q, k, v, inputs, key_valid[:, None])
        return self._output(out, inputs).astype(q.dtype), {"state": state}


class OutputNorm(nnx.Module):
    """RMS norm of each head's output [B, L, H, Dv] with a learned scale [Dv] shared by the heads, in float32, times
    silu(W_g x) per channel where `gated` (GLA's and Gated DeltaNet's output gate; DeltaNet's norm has none)."""

    def __init__(self, *, num_heads: int, d_model: int, eps: float, gated: bool, rngs: nnx.Rngs):
        self.num_heads, self.eps = num_heads, eps
        self.scale = nnx.Param(jnp.ones((d_model // num_heads,)))
        self.gate = nnx.Linear(d_model, d_model, use_bias=False, rngs=rngs) if gated else None

    def __call__(self, out, inputs):
        out = out.astype(jnp.float32)
        out = out * jax.lax.rsqrt((out * out).mean(-1, keepdims=True) + self.eps) * self.scale[...]
        if self.gate is None:
            return out
        gate = self.gate(feature_maps.in_float32(inputs))
        return out * jax.nn.silu(gate.reshape(gate.shape[:-1] + (self.num_heads, -1)))


def _per_head(projection, inputs, num_heads: int):
    """projection(x) in float32 [B, L, H * n] -> [B, L, H, n], or [B, L, H] for n = 1."""
    out = projection(feature_maps.in_float32(inputs))
    out = out.reshape(out.shape[:-1] + (num_heads, -1))
    return out[..., 0] if out.shape[-1] == 1 else out


def _masked(x, key_mask, padded_value: float):
    """x [B, L, H, *] with `padded_value` at the padded keys (key_mask [B, L] False)."""
    if key_mask is None:
        return x
    return jnp.where(key_mask.reshape(key_mask.shape + (1,) * (x.ndim - 2)), x, padded_value)


GATE_LOW_RANK_DIM = option_specs.Option(
    "gate_low_rank_dim", 16, "gla: the rank of its gate's projection of x (d_model -> r -> H d), fla's 16",
    rule=option_specs.at_least(1))
GATE_LOGIT_NORMALIZER = option_specs.Option(
    "gate_logit_normalizer", 16.0, "gla: log g = log sigmoid(W x + b) / this, fla's 16: gates near 1 at the start",
    rule=option_specs.positive("it divides the log gate"))


@register("gla")
class GLAAttention(InputGatedAttention):
    """Gated Linear Attention (Yang et al. 2024) as fla builds it: identity features, no normaliser, a decay per
    key channel read from x,

        S_t = diag(g_t) S_{t-1} + k_t v_t^T,    o_t = S_t^T (q_t / sqrt(d)),    y_t = norm(o_t) * silu(W_g x_t),

    log g_t = log sigmoid(W_up W_down x_t + b) / `gate_logit_normalizer` per head and key channel, W_down of rank
    `gate_low_rank_dim`; b starts at 0 (g = 0.958 at the normaliser 16) and is a decay's parameter
    (key_gates.DecayParam: kept out of weight decay). Bidirectionally a forward and a backward scan are added, key
    s reaching query t decayed by the gates between them (kernel_sums.gated_sums). Decoding: S decays per channel
    and adds its key, O(1) in the position."""

    OWN_OPTIONS = (GATE_LOW_RANK_DIM, GATE_LOGIT_NORMALIZER)

    def __init__(self, *, num_heads: int, head_dim: int, d_model: int, rngs: nnx.Rngs, gate_low_rank_dim: int = 16,
                 gate_logit_normalizer: float = 16.0, **base_options):
        super().__init__(**base_options)
        self.num_heads, self.feature_dim = num_heads, head_dim
        self.gate_logit_normalizer = gate_logit_normalizer
        self.gate_down = nnx.Linear(d_model, gate_low_rank_dim, use_bias=False, rngs=rngs)
        self.gate_up = nnx.Linear(gate_low_rank_dim, num_heads * head_dim, use_bias=False, rngs=rngs)
        self.gate_bias = key_gates.DecayParam(jnp.zeros((num_heads * head_dim,)))
        self.output_norm = self._norm(num_heads, d_model, gated=True, rngs=rngs)

    def _log_gate(self, inputs, key_mask):
        """log g [B, L, H, d] float32, 0 at padded keys."""
        logit = self.gate_up(self.gate_down(feature_maps.in_float32(inputs))) + self.gate_bias[...]
        log_gate = jax.nn.log_sigmoid(logit) / self.gate_logit_normalizer
        return _masked(log_gate.reshape(log_gate.shape[:-1] + (self.num_heads, -1)), key_mask, 0.0)

    def _rows(self, q, k, inputs, key_mask):
        """(q / sqrt(d), k zeroed at padded keys, log g), float32."""
        k = feature_maps.in_float32(k)
        return (feature_maps.in_float32(q) / math.sqrt(self.feature_dim), _masked(k, key_mask, 0.0),
                self._log_gate(inputs, key_mask))

    def _core(self, q, k, v, inputs, key_mask, causal):
        q, k, log_gate = self._rows(q, k, inputs, key_mask)
        return kernel_sums.gated_sums(q, k, v.astype(jnp.float32), log_gate, self.chunk_size, causal)

    def weights(self, q, k, mask=None, *, causal=False, inputs):
        q, k, log_gate = self._rows(q, k, inputs, masks.key_padding(mask, k.shape[0], k.shape[1]))
        return kernel_sums.decayed_scores(q, k, log_gate, jnp.arange(q.shape[1]), causal)

    def _step(self, state, q, k, v, inputs, key_mask):
        q, k, log_gate = self._rows(q, k, inputs, key_mask)
        state = state * jnp.exp(log_gate[:, 0])[..., None] + jnp.einsum("bhm,bhd->bhmd", k[:, 0],
                                                                         v[:, 0].astype(jnp.float32))
        return jnp.einsum("bqhm,bhmd->bqhd", q, state), state



@register("deltanet")
class DeltaNetAttention(InputGatedAttention):
    """DeltaNet (Schlag et al. 2021; Yang et al. 2024) as fla builds it: L2-normalised q and k, q scaled by
    1 / sqrt(d), the write strength read from x, a per-head RMS norm on the output,

        S_t = S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,    o_t = S_t q_t,    beta_t = sigmoid(W_beta x_t),

    W_beta [d_model, H] without bias (beta near 0.5 at the start). The sums are delta_sums' (a triangular solve per
    chunk, a scan across chunks); bidirectionally a forward and a backward scan as `delta`'s."""

    _gated = False  # DeltaNet's output norm has no gate; Gated DeltaNet's has one

    def __init__(self, *, num_heads: int, head_dim: int, d_model: int, rngs: nnx.Rngs, **base_options):
        super().__init__(**base_options)
        self.num_heads, self.feature_dim = num_heads, head_dim
        self.beta = nnx.Linear(d_model, num_heads, use_bias=False, rngs=rngs)
        self.output_norm = self._norm(num_heads, d_model, gated=self._gated, rngs=rngs)

    def _unit(self, x):
        """x / sqrt(|x|^2 + eps) in float32."""
        x = feature_maps.in_float32(x)
        return x / jnp.sqrt((x * x).sum(-1, keepdims=True) + self.eps)

    def _log_gate(self, inputs):
        """log g [B, L, H]: 0, no decay (Gated DeltaNet reads one from x)."""
        return jnp.zeros(inputs.shape[:2] + (self.num_heads,), jnp.float32)

    def _rows(self, q, k, inputs, key_mask):
        """(unit q / sqrt(d), unit k zeroed at padded keys, beta 0 there, log g 0 there), float32."""
        beta = _masked(jax.nn.sigmoid(_per_head(self.beta, inputs, self.num_heads)), key_mask, 0.0)
        return (self._unit(q) / math.sqrt(self.feature_dim), _masked(self._unit(k), key_mask, 0.0), beta,
                _masked(self._log_gate(inputs), key_mask, 0.0))

    def _core(self, q, k, v, inputs, key_mask, causal):
        q, k, beta, log_gate = self._rows(q, k, inputs, key_mask)
        attend = delta_sums.causal_delta_rule if causal else delta_sums.bidirectional_delta_rule
        return attend(q, k, v.astype(jnp.float32), beta, log_gate, self.chunk_size)

    def weights(self, q, k, mask=None, *, causal=False, inputs):
        return delta_sums.weights(*self._rows(q, k, inputs, masks.key_padding(mask, k.shape[0], k.shape[1])),
                                  causal)

    def _step(self, state, q, k, v, inputs, key_mask):
        q, k, beta, log_gate = self._rows(q, k, inputs, key_mask)
        return delta_sums.step(state, q, k, v, beta, log_gate)



@register("gated_deltanet")
class GatedDeltaNetAttention(DeltaNetAttention):
    """Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025) as fla builds it: DeltaNet with Mamba2's decay per head read
    from x and an output gate,

        S_t = a_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,    a_t = exp(-exp(A_log) softplus(W_a x_t + dt_bias)),

    y_t = norm(o_t) * silu(W_g x_t). A_log = log A with A ~ U[1, 16] per head and dt_bias = softplus^-1(dt) with dt
    log-uniform in [1e-3, 1e-1] (Mamba2's initialisation): the heads start at decays spread from about 0.2 to
    0.999 (a = exp(-A dt) at x = 0). Both are decays' parameters (key_gates.DecayParam), out of weight decay."""

    _gated = True

    def __init__(self, *, num_heads: int, head_dim: int, d_model: int, rngs: nnx.Rngs, **base_options):
        super().__init__(num_heads=num_heads, head_dim=head_dim, d_model=d_model, rngs=rngs, **base_options)
        self.decay = nnx.Linear(d_model, num_heads, use_bias=False, rngs=rngs)
        a_key, dt_key = jax.random.split(rngs.params())
        self.a_log = key_gates.DecayParam(jnp.log(jax.random.uniform(a_key, (num_heads,), minval=A_RANGE[0],
                                                                      maxval=A_RANGE[1])))
        log_dt = jax.random.uniform(dt_key, (num_heads,), minval=math.log(DT_RANGE[0]), maxval=math.log(DT_RANGE[1]))
        dt = jnp.exp(log_dt)
        self.dt_bias = key_gates.DecayParam(dt + jnp.log(-jnp.expm1(-dt)))  # softplus(dt_bias) = dt

    def _log_gate(self, inputs):
        """log a [B, L, H] = -exp(A_log) softplus(W_a x + dt_bias) <= 0."""
        step = jax.nn.softplus(_per_head(self.decay, inputs, self.num_heads) + self.dt_bias[...])
        return -jnp.exp(self.a_log[...]) * step
