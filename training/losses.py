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


def prediction_sums(model, batch, input_tokens, label_smoothing: float = 0.0):
    """(mean loss over the predicted positions, sums over them) of model(inputs, positions) -> logits, for
    a batch laid out as data.mlm.mask_tokens' (inputs, positions, targets, weights): the masked-token
    and the recall tasks. `input_tokens` is the throughput's count of the batch's tokens."""
    logits = model(batch["inputs"], batch["positions"])
    sums = {**weighted_sums(logits, batch["targets"], batch["weights"], label_smoothing), "input_tokens": input_tokens}
    return sums["loss"] / jnp.maximum(sums["predictions"], 1.0), sums


def weighted_sums(logits, targets, weights, label_smoothing: float = 0.0) -> dict:
    """The loss, the count and the correct predictions of `logits`, summed over the positions `weights`
    weighs."""
    losses, hits = token_cross_entropy(logits, targets, weights, label_smoothing)
    return {"loss": losses.sum(), "predictions": weights.sum(), "correct": (hits * weights).sum()}


def prediction_loss_and_accuracy(sums: dict) -> tuple[float, float]:
    """(mean loss, accuracy) of prediction_sums added over batches or steps."""
    count = max(sums["predictions"], 1.0)
    return float(sums["loss"] / count), float(sums["correct"] / count)
