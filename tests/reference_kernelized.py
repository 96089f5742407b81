"""Dense references of the kernelised kinds: normalize(phi(Q) phi(K)^T masked), each feature map written out
here, in numpy or jax.numpy (xp); the rows of a feature pair are [B, L, H, d] queries and keys."""
import numpy as np

from kind_harness import dense_reference

EPS = 1e-6
CHUNKS = {"chunk_size": 5, "eps": EPS}  # chunks of 5 do not divide the tests' 13 positions


def _normalised(xp, phi_q, phi_k, allowed):
    scores = xp.einsum("bqhm,bkhm->bhqk", phi_q, phi_k) * allowed
    return scores / (scores.sum(-1, keepdims=True) + EPS)


@dense_reference("linear", **CHUNKS)
def linear(xp, q, k, allowed, arrays):
    phi = lambda x: xp.where(x > 0, x + 1, xp.exp(xp.minimum(x, 0)))  # elu(x) + 1
    return _normalised(xp, phi(q), phi(k), allowed)


@dense_reference("relu", relu_eps=1e-3, **CHUNKS)
def relu(xp, q, k, allowed, arrays):
    phi = lambda x: xp.maximum(x, 0) + 1e-3
    return _normalised(xp, phi(q), phi(k), allowed)


@dense_reference("taylor", taylor_order=2, **CHUNKS)
def taylor(xp, q, k, allowed, arrays):
    def phi(x):  # order 2, uncompressed: [1, x, x (x) x / sqrt 2] . [...] = 1 + s + s^2 / 2
        x = x * q.shape[-1] ** -0.25
        outer = (x[..., :, None] * x[..., None, :]).reshape(x.shape[:-1] + (-1,))
        return xp.concatenate([xp.ones_like(x[..., :1]), x, outer / np.sqrt(2)], axis=-1)

    return _normalised(xp, phi(q), phi(k), allowed)


@dense_reference("exp_limit", exp_limit_n=2, **CHUNKS)
def exp_limit(xp, q, k, allowed, arrays):
    def phi(x):  # n = 2: z = [1, x / sqrt 2], phi = z (x) z, phi . phi = (z . z)^2
        x = x * q.shape[-1] ** -0.25
        z = xp.concatenate([xp.ones_like(x[..., :1]), x / np.sqrt(2)], axis=-1)
        return (z[..., :, None] * z[..., None, :]).reshape(z.shape[:-1] + (-1,))

    return _normalised(xp, phi(q), phi(k), allowed)


@dense_reference("cosformer", **CHUNKS)
def cosformer(xp, q, k, allowed, arrays):
    max_len = max(q.shape[1], k.shape[1])

    def phi(x):
        angle = (np.pi * np.arange(x.shape[1]) / (2 * max_len))[None, :, None, None]
        relu = xp.maximum(x, 0)
        return xp.concatenate([relu * np.cos(angle), relu * np.sin(angle)], axis=-1)

    return _normalised(xp, phi(q), phi(k), allowed)


@dense_reference("hedgehog", **CHUNKS)
def hedgehog(xp, q, k, allowed, arrays):
    def phi(x):
        projected = xp.einsum("blhd,hde->blhe", x, arrays["weight"])
        logits = xp.concatenate([projected, -projected], axis=-1)
        e = xp.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return _normalised(xp, phi(q), phi(k), allowed)


# m = 8 < L lets the rank bound bind. The plain estimator, unstabilised: fine in float64 at these norms.
@dense_reference("performer", num_features=8, **CHUNKS)
def performer(xp, q, k, allowed, arrays):
    projection = arrays["projection"]

    def phi(x):
        x = x * q.shape[-1] ** -0.25
        exponent = xp.einsum("blhd,hmd->blhm", x, projection) - (x * x).sum(-1, keepdims=True) / 2
        return xp.exp(exponent) / np.sqrt(projection.shape[1])

    return _normalised(xp, phi(q), phi(k), allowed)


def gated_log_decay(xp, k, key_valid, lq, weight, bias):
    """[B, H, Lq, Lk] log of the product of the gates g_r = sigmoid(k_r . w_h + b_h) of the key positions r
    strictly after the earlier of query t and key s, up to the later (query t at position t of the keys' axis);
    a padded key's gate is 1. Summed through an explicit indicator of the positions between, not a cumsum."""
    lk = k.shape[1]
    logit = xp.einsum("blhd,hd->blh", k, weight) + bias
    log_gate = -xp.logaddexp(0.0, -logit) * key_valid[:, :, None]  # log sigmoid
    t, s, r = np.arange(lq)[:, None, None], np.arange(lk)[None, :, None], np.arange(lk)[None, None, :]
    between = (np.minimum(t, s) < r) & (r <= np.maximum(t, s))
    return xp.einsum("tsr,brh->bhts", between.astype(float), log_gate)


@dense_reference("gated_linear", **CHUNKS)
def gated_linear(xp, q, k, allowed, arrays):
    phi = lambda x: xp.where(x > 0, x + 1, xp.exp(xp.minimum(x, 0)))  # elu(x) + 1
    key_valid = allowed[:, 0, -1, :]  # the last query's row: every allowed key, causal or not
    log_decay = gated_log_decay(xp, k, key_valid, q.shape[1], arrays["gate_weight"], arrays["gate_bias"])
    return _normalised(xp, phi(q), phi(k), allowed * xp.exp(log_decay))


@dense_reference("mala", **CHUNKS)
def mala(xp, q, k, allowed, arrays):
    """A_ij = s_ij / (Z_i + eps) + s_ij - Z_i / N_i over the allowed keys, s = (elu + 1)(q).(elu + 1)(k), Z_i the
    row's sum of s and N_i its number of allowed keys: MALA's beta s - gamma with beta = 1 + 1 / Z, gamma = Z / N."""
    phi = lambda x: xp.where(x > 0, x + 1, xp.exp(xp.minimum(x, 0)))
    scores = xp.einsum("bqhm,bkhm->bhqk", phi(q), phi(k)) * allowed
    total, count = scores.sum(-1, keepdims=True), allowed.sum(-1, keepdims=True)
    return (scores / (total + EPS) + scores - total / np.maximum(count, 1)) * allowed
