"""The shape controls beyond the kind contract: softmax_capped's rows cannot be sharper than its cap allows, and
mala's rows sum to 1 and sharpen as the query grows, where linear attention's (elu + 1) settle."""
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU


def _create(kind, **options):
    return attention.create(kind, num_heads=2, head_dim=8, rngs=nnx.Rngs(0), **options)


def _entropy_fraction(rows):
    return -(rows * np.log(rows)).sum(-1) / np.log(rows.shape[-1])


def _flattest_limit(cap, length):
    """The lowest entropy fraction of a row whose logits lie in [-cap, cap]: some keys at +cap, the rest at -cap
    (a row's entropy is concave in its logits, so its minimum over the box is at a corner)."""
    fractions = []
    for high in range(1, length):
        weights = np.r_[np.full(high, np.exp(cap)), np.full(length - high, np.exp(-cap))]
        fractions.append(_entropy_fraction(weights / weights.sum()))
    return min(fractions)


def test_capped_rows_are_no_sharper_than_the_cap_allows_and_small_scores_are_softmax():
    """Scores of +-40 (norm 16 queries and keys) would make softmax's rows one-hot; capped at 1 and at 2, no row at
    L = 128 goes below the flattest limit of its cap (0.90 and 0.66 of the maximum entropy). Scores near 0 are
    softmax's own (tanh(x) ~ x)."""
    rng = np.random.default_rng(0)
    q, k = (jnp.asarray(16 * rng.normal(size=(2, 128, 2, 8)) / np.sqrt(8), jnp.float32) for _ in range(2))
    assert _flattest_limit(1.0, 128) == pytest.approx(0.902, abs=1e-3)
    softmax_rows = np.asarray(_create("softmax").weights(q, k), np.float64)
    assert _entropy_fraction(np.maximum(softmax_rows, 1e-30)).mean() < 0.3
    for cap in (1.0, 2.0):
        fractions = _entropy_fraction(np.asarray(_create("softmax_capped", logit_cap=cap).weights(q, k), np.float64))
        assert fractions.min() >= _flattest_limit(cap, 128) - 1e-6
    small_q = q / 4000
    np.testing.assert_allclose(_create("softmax_capped", logit_cap=1.0).weights(small_q, k),
                               _create("softmax").weights(small_q, k), rtol=1e-4)


def test_mala_rows_sum_to_one_and_sharpen_as_the_query_grows():
    """Queries scaled by 1, 4 and 16 (positive, so that elu + 1 is x + 1 and phi(q) grows with the scale): linear
    attention's rows converge to a fixed row (the query's magnitude cancels), MALA's spread (largest weight less
    smallest) grows toward proportion (phi(a q) = a q + 1), and its rows keep summing to 1 with signed entries. Its
    entries are of the size of the scores' spread, about 17 at scale 1 here where linear's spread is 0.035."""
    rng = np.random.default_rng(1)
    q = np.abs(rng.normal(size=(1, 6, 2, 8)))
    k = rng.normal(size=(1, 32, 2, 8))
    spreads = {}
    for kind in ("linear", "mala"):
        module = _create(kind)
        rows = [np.asarray(module.weights(jnp.asarray(scale * q, jnp.float32), jnp.asarray(k, jnp.float32)))
                for scale in (1, 4, 16)]
        spreads[kind] = [float((row.max(-1) - row.min(-1)).mean()) for row in rows]
        if kind == "mala":  # entries of size Z / N, each rounded: their sum errs by up to n eps32 sum(|entries|)
            for row in rows:
                np.testing.assert_array_less(np.abs(row.sum(-1) - 1), 32 * 1.2e-7 * np.abs(row).sum(-1))
            assert rows[-1].min() < 0
    assert spreads["linear"][2] < 1.3 * spreads["linear"][1]
    assert spreads["mala"][2] > 3 * spreads["mala"][1] and spreads["mala"][1] > 2 * spreads["mala"][0]


@pytest.mark.parametrize("causal", [False, True])
def test_mala_in_bfloat16_keeps_the_difference_of_its_two_large_terms(causal):
    """Its output is l (1 + Z) - Z vbar with Z near L m: computed in bfloat16 throughout the difference would be
    noise; from bfloat16 inputs it stays within bfloat16's rounding of the float32 output."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(2, 64, 2, 8)) for _ in range(3))
    module = _create("mala", chunk_size=16)
    full = np.asarray(module(*(jnp.asarray(x, jnp.float32) for x in (q, k, v)), causal=causal))
    half = np.asarray(module(*(jnp.asarray(x, jnp.bfloat16) for x in (q, k, v)), causal=causal), np.float32)
    assert np.abs(full).max() > 10  # the terms are large: the difference would show rounding
    np.testing.assert_allclose(half, full, atol=0.05 * np.abs(full).max())
