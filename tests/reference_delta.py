"""The delta rule's kinds written as their sequential recurrence, one position at a time, in numpy or jax.numpy
(xp), in the papers' convention S [Dv, m]; and their dense references for the contract of tests/kind_harness.py:
the recurrence run on the identity's columns as values (v_s = e_s), whose output at t is row t of A in o = A v."""
import jax
import jax.numpy as jnp
import numpy as np

from kind_harness import dense_reference

EPS = 1e-6
OPTIONS = {"chunk_size": 5, "eps": EPS}  # chunks of 5 do not divide the contract's 13 positions


def gated_inputs(batch: int, heads: int, dim: int, seed: int, lq: int, lk: int):
    """q, k, v float64 (k wide enough that the gates and beta read from it spread over (0, 1)) and key_valid
    [batch, lk], example 0 padded at 3 positions mid-sequence and at the end: the inputs of the tests of the
    kinds that read gates from the key (tests/test_gated_linear.py, tests/test_delta_rule.py)."""
    rng = np.random.default_rng(seed)
    q, v = rng.normal(size=(batch, lq, heads, dim)), rng.normal(size=(batch, lk, heads, dim))
    k = 2 * rng.normal(size=(batch, lk, heads, dim))
    key_valid = np.ones((batch, lk), bool)
    key_valid[0, [2, lk - 2, lk - 1]] = False
    return q, k, v, key_valid


def unit(xp, x):
    return x / xp.sqrt((x * x).sum(-1, keepdims=True) + EPS)


def sigmoid(xp, x):
    return 1 / (1 + xp.exp(-x))


def by_position(xp, step, carry, xs):
    """step(carry, rows) -> (carry, output) over the positions t of xs ([B, L, *] arrays; rows: each one's
    [B, *] at t) -> the outputs stacked on axis 1 (a tuple of outputs alike). In numpy a loop; in jax.numpy one
    lax.scan, whose step compiles once where a loop would compile a copy per position (seconds, for a gradient)."""
    if xp is np:
        outputs = []
        for t in range(xs[0].shape[1]):
            carry, output = step(carry, [x[:, t] for x in xs])
            outputs.append(output)
        return jax.tree.map(lambda *rows: np.stack(rows, 1), *outputs)
    _, outputs = jax.lax.scan(step, carry, [jnp.moveaxis(x, 1, 0) for x in xs])
    return jax.tree.map(lambda rows: jnp.moveaxis(rows, 0, 1), outputs)


def _scan(xp, q, k, v, beta, gate, strict):
    """S_t = g_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, read as S_t q_t, or where `strict` as
    g_t S_{t-1} q_t (key t not yet written); [B, L, H, *] inputs, gate and beta [B, L, H]."""
    batch, _, heads, features = k.shape
    identity = np.eye(features)

    def step(state, rows):
        q, k, v, beta, gate = rows
        decayed = gate[:, :, None, None] * state
        b = beta[:, :, None, None]
        erase = identity - b * xp.einsum("bhm,bhn->bhmn", k, k)
        state_after = xp.einsum("bhdm,bhmn->bhdn", decayed, erase) + b * xp.einsum("bhd,bhm->bhdm", v, k)
        return state_after, xp.einsum("bhdm,bhm->bhd", decayed if strict else state_after, q)

    return by_position(xp, step, xp.zeros((batch, heads, v.shape[-1], features)), [q, k, v, beta, gate])


def recurrence(xp, q, k, v, key_valid, beta_weight, beta_bias, gate_weight=None, gate_bias=None, causal=True):
    """The kind's output [B, Lq, H, Dv] from raw q [B, Lq, H, m], k [B, Lk, H, m], v [B, Lk, H, Dv], key_valid
    [B, Lk]: unit q and k, beta (and the gate, where given) read from the raw key, a padded key's beta 0 and gate 1.
    Bidirectionally, query t at position t of the keys' axis (both padded to the longer side with absent keys):
    the forward recurrence plus a strict one over the reversed sequence, in which each position applies the gate
    of the (unreversed) position after it, so that key s > t is decayed by the gates of t+1..s."""
    queries, length = q.shape[1], max(q.shape[1], k.shape[1])
    pad = lambda x: xp.concatenate([x, xp.zeros((x.shape[0], length - x.shape[1]) + x.shape[2:])], axis=1)
    q, k, v = pad(q), pad(k), pad(v)
    key_valid = np.concatenate([key_valid, np.zeros((key_valid.shape[0], length - key_valid.shape[1]), bool)], 1)
    valid = key_valid[:, :, None]
    beta = xp.where(valid, sigmoid(xp, xp.einsum("blhd,hd->blh", k, beta_weight) + beta_bias), 0.0)
    gate = xp.ones(beta.shape) if gate_weight is None else xp.where(
        valid, sigmoid(xp, xp.einsum("blhd,hd->blh", k, gate_weight) + gate_bias), 1.0)
    q, k = unit(xp, q), unit(xp, k) * valid[..., None]
    out = _scan(xp, q, k, v, beta, gate, strict=False)
    if not causal:
        next_gate = xp.concatenate([gate[:, 1:], xp.ones_like(gate[:, :1])], axis=1)
        flip = lambda x: x[:, ::-1]
        out = out + flip(_scan(xp, flip(q), flip(k), flip(v), flip(beta), flip(next_gate), strict=True))
    return out[:, :queries]


def weights(xp, q, k, allowed, arrays):
    """A [B, H, Lq, Lk] from the bidirectional recurrence on the identity's columns, times `allowed`: a causal
    mask keeps exactly the forward recurrence's part (keys s <= t)."""
    batch, lk, heads, _ = k.shape
    key_valid = np.asarray(allowed[:, 0, -1, :], bool)  # the last query's row: every allowed key, causal or not
    identity = xp.broadcast_to(xp.asarray(np.eye(lk))[None, :, None, :], (batch, lk, heads, lk))
    rows = recurrence(xp, q, k, identity, key_valid, causal=False, **arrays)
    return rows.transpose(0, 2, 1, 3) * allowed


@dense_reference("delta", **OPTIONS)
def delta(xp, q, k, allowed, arrays):
    return weights(xp, q, k, allowed, arrays)


@dense_reference("gated_delta", **OPTIONS)
def gated_delta(xp, q, k, allowed, arrays):
    return weights(xp, q, k, allowed, arrays)
