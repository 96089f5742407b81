"""Token-level cross-entropy shared by the tasks."""
import jax.numpy as jnp
import optax


def token_cross_entropy(logits, targets, weights, label_smoothing: float = 0.0):
    """(weighted per-token losses, per-token argmax hits) for logits [..., V] and int targets [...]."""
    logits = logits.astype(jnp.float32)
    one_hot = jnp.asarray(targets[..., None] == jnp.arange(logits.shape[-1]), jnp.float32)
    smoothed = optax.smooth_labels(one_hot, label_smoothing) if label_smoothing else one_hot
    losses = optax.softmax_cross_entropy(logits, smoothed) * weights
    return losses, jnp.argmax(logits, -1) == targets
