"""Model FLOPs of an MLM training step counted by hand from the config, for MFU: XLA's cost analysis counts a
custom call (cuDNN's fused attention, a Pallas kernel) as 0 FLOPs, so the rate of a step that calls one would
silently lose its attention.

The count is the matrix multiplications', the convention of MFU (PaLM, Appendix B): per layer the q, k, v and output
projections, the attention itself and the MLP; the prediction head at the masked positions; the backward pass twice
the forward. Softmax attention counts Q K^T and A V over every (query, key) pair (a causal mask's skipped half
included, as PaLM counts it); a kernelised kind its O(L) sums, phi(K)^T [V, 1] and phi(Q) S, at its feature
dimension m. Elementwise work (softmax, norms, feature maps, the convolution) is left out: it is not what a matmul
unit's peak measures.
"""
import dataclasses

BACKWARD_FACTOR = 3  # forward + backward (the gradients of the activations and of the weights: 2x the forward)


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the count reads of an MLM config and its batch."""
    batch: int
    length: int  # L, tokens per sequence
    predicted: int  # masked positions per sequence the head predicts
    d_model: int
    num_layers: int
    num_heads: int
    qk_head_dim: int  # d' per head
    mlp_dim: int
    vocab_size: int
    feature_dim: int | None  # m of a kernelised kind; None for softmax


def mlm_shape(config, batch: dict, feature_dim: int | None) -> Shape:
    """The Shape of configs/mlm.py's model on `batch` (inputs [B, L], positions [B, P])."""
    model = config.model
    batch_size, length = batch["inputs"].shape
    return Shape(batch_size, length, batch["positions"].shape[1], model.d_model, model.num_layers, model.num_heads,
                 model.qk_head_dim or model.d_model // model.num_heads, model.mlp_dim, config.dataset.vocab_size,
                 feature_dim)


def forward_flops(shape: Shape) -> dict[str, float]:
    """Forward matmul FLOPs of one step by part: projections, attention, mlp, head (2 per multiply-add)."""
    b, length, d = shape.batch, shape.length, shape.d_model
    qk_width = shape.num_heads * shape.qk_head_dim
    per_layer_projections = 2 * length * d * (2 * qk_width + 2 * d)
    if shape.feature_dim is None:
        per_layer_attention = 2 * length * length * (qk_width + d)
    else:  # phi(K)^T [V, 1] and phi(Q) S, each m x (d_v + 1) per position and head
        per_layer_attention = 2 * 2 * length * shape.feature_dim * (d + shape.num_heads)
    per_layer_mlp = 2 * 2 * length * d * shape.mlp_dim
    head = 2 * shape.predicted * d * (d + shape.vocab_size)  # the transform, then the tied logits
    layers = b * shape.num_layers
    return {"projections": layers * per_layer_projections, "attention": layers * per_layer_attention,
            "mlp": layers * per_layer_mlp, "head": b * head}


def train_step_flops(shape: Shape) -> float:
    """Model FLOPs of one training step: BACKWARD_FACTOR x the forward's."""
    return BACKWARD_FACTOR * sum(forward_flops(shape).values())
