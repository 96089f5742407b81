"""Pooling heads against dense numpy references written here: outputs, padding, penalties, gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models import pooling

B, L, D, HIDDEN, HOPS, PENALTY = 3, 7, 8, 5, 3, 0.5
LENGTHS = np.array([7, 4, 1])  # one full row, one padded, one with a single position


@pytest.fixture(scope="module")
def inputs():
    states = np.random.default_rng(0).normal(size=(B, L, D)).astype(np.float32)
    return states, np.arange(L)[None, :] < LENGTHS[:, None]


def _head(name):
    return pooling.create(name, D, hidden_dim=HIDDEN, hops=HOPS, penalty=PENALTY, rngs=nnx.Rngs(0))


def _softmax_rows(scores, mask):
    """scores [B, r, L] -> weights over the valid positions, float64."""
    scores = np.where(mask[:, None, :], scores, -np.inf)
    scores = scores - scores.max(-1, keepdims=True)
    return np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)


def _attentive_reference(head, states, mask):
    """(pooled [B, r * D], weights [B, r, L]) of A = softmax(W2 tanh(W1 H^T + b1)) in float64."""
    w1, b1 = np.asarray(head.hidden.kernel[...], np.float64), np.asarray(head.hidden.bias[...], np.float64)
    w2 = np.asarray(head.scores.kernel[...], np.float64)
    scores = np.einsum("blh,hr->brl", np.tanh(states @ w1 + b1), w2)
    weights = _softmax_rows(scores, mask)
    return np.einsum("brl,bld->brd", weights, states).reshape(len(states), -1), weights


def _reference(name, head, states, mask):
    """(pooled, penalty) of each head, in float64."""
    states = states.astype(np.float64)
    if name == "cls":
        return states[:, 0], np.zeros(B)
    if name == "mean":
        return np.stack([states[b, : LENGTHS[b]].mean(0) for b in range(B)]), np.zeros(B)
    pooled, weights = _attentive_reference(head, states, mask)
    if name == "feed_forward":
        return pooled, np.zeros(B)
    gram = weights @ weights.transpose(0, 2, 1)
    return pooled, PENALTY * ((gram - np.eye(HOPS)) ** 2).sum((1, 2))


@pytest.mark.parametrize("name", pooling.POOLINGS)
def test_each_head_matches_its_dense_reference(inputs, name):
    states, mask = inputs
    head = _head(name)
    pooled, penalty = head(jnp.asarray(states), jnp.asarray(mask))
    expected_pooled, expected_penalty = _reference(name, head, states, mask)
    assert pooled.shape == (B, head.output_dim)
    np.testing.assert_allclose(pooled, expected_pooled, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(penalty, expected_penalty, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", pooling.POOLINGS)
def test_padded_positions_change_nothing(inputs, name):
    states, mask = inputs
    head = _head(name)
    moved = np.where(mask[..., None], states, 1e3)  # large values at every padded position
    for a, b in zip(head(jnp.asarray(states), jnp.asarray(mask)), head(jnp.asarray(moved), jnp.asarray(mask))):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_feed_forward_attends_with_no_query_and_sums_to_one(inputs):
    states, mask = inputs
    head = _head("feed_forward")
    _, weights = _attentive_reference(head, states.astype(np.float64), mask)
    assert head.output_dim == D and weights.shape == (B, 1, L)
    np.testing.assert_allclose(weights.sum(-1), 1.0)
    assert weights[2, 0, 0] == 1.0  # a single valid position takes all the weight


@pytest.mark.parametrize("name", ["mean", "feed_forward", "structured"])
def test_gradients_match_the_reference(inputs, name):
    """d/d states of sum(pooled * c) + sum(penalty), against jax.grad of the reference's formula in jnp."""
    states, mask = inputs
    head = _head(name)
    cotangent = jnp.asarray(np.random.default_rng(1).normal(size=(B, head.output_dim)), jnp.float32)

    def objective(x):
        pooled, penalty = head(x, jnp.asarray(mask))
        return jnp.sum(pooled * cotangent) + jnp.sum(penalty)

    def reference(x):
        if name == "mean":
            weights = jnp.asarray(mask, jnp.float32)[..., None] / jnp.asarray(LENGTHS, jnp.float32)[:, None, None]
            return jnp.sum((x * weights).sum(1) * cotangent)
        scores = jnp.einsum("blh,hr->brl", jnp.tanh(x @ head.hidden.kernel[...] + head.hidden.bias[...]),
                            head.scores.kernel[...])
        weights = jax.nn.softmax(jnp.where(jnp.asarray(mask)[:, None, :], scores, -1e30), axis=-1)
        pooled = jnp.einsum("brl,bld->brd", weights, x).reshape(B, -1)
        gram = jnp.einsum("brl,bsl->brs", weights, weights)
        penalty = PENALTY * jnp.sum((gram - jnp.eye(weights.shape[1])) ** 2) if name == "structured" else 0.0
        return jnp.sum(pooled * cotangent) + penalty

    x = jnp.asarray(states)
    np.testing.assert_allclose(jax.grad(objective)(x), jax.grad(reference)(x), rtol=1e-4, atol=1e-5)


def test_an_unknown_head_names_the_choices():
    with pytest.raises(ValueError, match="pooling='max'; choose one of: cls, mean, feed_forward, structured"):
        pooling.create("max", D, hidden_dim=HIDDEN, hops=HOPS, penalty=PENALTY, rngs=nnx.Rngs(0))
