"""References of the kinds that read the layer's input (attention/input_gated.py): each paper's recurrence, one
position at a time, written against an array module `xp` (numpy in float64 for values, jax.numpy for gradients).

`reference(xp, q, k, v, x, key_valid, causal, arrays) -> (core, output)`, both [B, L, H, Dv]: `core` is o_t before
the output norm and gate (what the kind's `weights` times v must give), `output` the kind's. `arrays` are the
module's parameters by dotted path (`gate_down.kernel`, `a_log`, ...). Bidirectionally the lab adds a backward
recurrence over keys L-1..t+1 (read before key t) to the forward one: key s > t reaches query t through the
updates of the keys between them and the gates of t+1..s. A padded key (key_valid False) writes nothing, erases
nothing and decays nothing.
"""
import math

RECURRENCES = {}


def recurrence(kind: str, **options):
    """Decorator: the reference of `kind`, built with `options` in the tests."""
    def declare(reference):
        RECURRENCES[kind] = (reference, options)
        return reference
    return declare


def _sigmoid(xp, z):
    return 1 / (1 + xp.exp(-z))


def _output_norm(xp, o, x, arrays, eps, gated: bool):
    """RMS norm of each head's o times the shared scale, times silu(x W_g) per channel where gated; o itself for a
    module built without the norm (output_norm=False: no such parameters)."""
    if "output_norm.scale" not in arrays:
        return o
    out = o / xp.sqrt((o * o).mean(-1, keepdims=True) + eps) * arrays["output_norm.scale"]
    if not gated:
        return out
    gate = (x @ arrays["output_norm.gate.kernel"]).reshape(o.shape)
    return out * gate * _sigmoid(xp, gate)


def _unit(xp, z, eps):
    return z / xp.sqrt((z * z).sum(-1, keepdims=True) + eps)


def _scan(xp, length: int, causal: bool, read, write, gate_after):
    """o_t from a forward recurrence (write key t, then read) and, bidirectionally, a backward one (read the
    keys > t decayed by the gate of t + 1, then write key t): `read(state, t)`, `write(state, t, g)` with g the
    gate applied to the state before key t's write, `gate_after(t)` the gate at position t (1 past the end)."""
    state, forward = None, []
    for t in range(length):
        state = write(state, t, gate_after(t))
        forward.append(read(state, t))
    out = xp.stack(forward, axis=1)
    if causal:
        return out
    state, backward = None, [None] * length
    for t in reversed(range(length)):
        g = gate_after(t + 1)
        backward[t] = read(None if state is None else g * state, t)
        state = write(state, t, g)
    return out + xp.stack(backward, axis=1)


@recurrence("gla", chunk_size=5, gate_low_rank_dim=3)
def gla(xp, q, k, v, x, key_valid, causal, arrays, eps=1e-6, normalizer=16.0):
    """S_t = diag(g_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t / sqrt(d); log g_t = log sigmoid(x W_down W_up + b) / 16."""
    batch, length, heads, d = q.shape
    logit = x @ arrays["gate_down.kernel"] @ arrays["gate_up.kernel"] + arrays["gate_bias"]
    g = xp.exp(-xp.logaddexp(0.0, -logit) / normalizer).reshape(batch, length, heads, d)
    valid = key_valid[:, :, None, None]
    g, k = xp.where(valid, g, 1.0), xp.where(valid, k, 0.0)
    ones = xp.ones((batch, heads, d))

    def gate_after(t):  # S [B, H, d, Dv] decays along its rows, the key channels
        return (g[:, t] if t < length else ones)[..., None]

    def write(state, t, gate):
        added = k[:, t, :, :, None] * v[:, t, :, None, :]
        return added if state is None else gate * state + added

    def read(state, t):
        return 0 * v[:, t] if state is None else xp.einsum("bhm,bhmd->bhd", q[:, t] / math.sqrt(d), state)

    core = _scan(xp, length, causal, read, write, gate_after)
    return core, _output_norm(xp, core, x, arrays, eps, gated=True)


def _delta_rule(xp, q, k, v, beta, a, key_valid, causal, eps):
    """S_t = a_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T (S [Dv, d] per head), o_t = S_t q_t, with q and
    k L2-normalised and q scaled by 1 / sqrt(d)."""
    batch, length, heads, d = q.shape
    valid = key_valid[:, :, None]
    beta, a = xp.where(valid, beta, 0.0), xp.where(valid, a, 1.0)
    q, k = _unit(xp, q, eps) / math.sqrt(d), xp.where(valid[..., None], _unit(xp, k, eps), 0.0)
    identity = xp.eye(d)

    def gate_after(t):
        return (a[:, t] if t < length else xp.ones((batch, heads)))[:, :, None, None]

    def write(state, t, gate):
        b = beta[:, t, :, None, None]
        added = b * v[:, t, :, :, None] * k[:, t, :, None, :]
        if state is None:
            return added
        erase = identity - b * k[:, t, :, :, None] * k[:, t, :, None, :]
        return gate * xp.einsum("bhvd,bhde->bhve", state, erase) + added

    def read(state, t):
        return 0 * v[:, t] if state is None else xp.einsum("bhvd,bhd->bhv", state, q[:, t])

    return _scan(xp, length, causal, read, write, gate_after)


@recurrence("deltanet", chunk_size=5)
def deltanet(xp, q, k, v, x, key_valid, causal, arrays, eps=1e-6):
    """beta_t = sigmoid(x_t W_beta), no decay, an RMS norm on o."""
    beta = _sigmoid(xp, x @ arrays["beta.kernel"])
    core = _delta_rule(xp, q, k, v, beta, xp.ones_like(beta), key_valid, causal, eps)
    return core, _output_norm(xp, core, x, arrays, eps, gated=False)


@recurrence("gated_deltanet", chunk_size=5)
def gated_deltanet(xp, q, k, v, x, key_valid, causal, arrays, eps=1e-6):
    """a_t = exp(-exp(A_log) softplus(x_t W_a + dt_bias)), beta_t = sigmoid(x_t W_beta), norm(o) * silu(x W_g)."""
    beta = _sigmoid(xp, x @ arrays["beta.kernel"])
    a = xp.exp(-xp.exp(arrays["a_log"]) * xp.logaddexp(0.0, x @ arrays["decay.kernel"] + arrays["dt_bias"]))
    core = _delta_rule(xp, q, k, v, beta, a, key_valid, causal, eps)
    return core, _output_norm(xp, core, x, arrays, eps, gated=True)
