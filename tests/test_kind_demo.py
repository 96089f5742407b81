"""How a new kind comes in: the kind, its dense reference and one line of contract, all in this file.

Softplus features, phi(x) = log(1 + e^x) (positive everywhere, so the normaliser is too), on the kernelised
base: it inherits the chunked causal form and the decoding state. Registering it and declaring its
reference is all it takes for every test of the kind contract (tests/kind_harness.py) to run on it."""
import jax
from flax import nnx

import attention
from attention.kernelized_base import KernelizedAttention
from kind_harness import KindContract, dense_reference

DEMO = "demo_softplus"


@attention.register(DEMO)
class SoftplusAttention(KernelizedAttention):
    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, **base_options):
        super().__init__(**base_options)
        self.feature_dim = head_dim

    def features(self, x):
        return jax.nn.softplus(x)


@dense_reference(DEMO, chunk_size=5)
def softplus_reference(xp, q, k, allowed, arrays):
    phi = lambda x: xp.logaddexp(0.0, x)
    scores = xp.einsum("bqhd,bkhd->bhqk", phi(q), phi(k)) * allowed
    return scores / (scores.sum(-1, keepdims=True) + 1e-6)


class TestDemoKind(KindContract):
    kinds = (DEMO,)
