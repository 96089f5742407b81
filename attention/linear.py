"""Linear attention with phi = elu + 1 (Katharopoulos et al. 2020)."""
from flax import nnx

from attention import feature_maps
from attention.kernelized import KernelizedAttention
from attention.registry import register


@register("linear")
class LinearAttention(KernelizedAttention):
    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, eps: float = 1e-6,
                 chunk_size: int = 64):
        super().__init__(eps=eps, chunk_size=chunk_size)
        self.feature_dim = head_dim

    def features(self, x):
        return feature_maps.elu_plus_one(x)
