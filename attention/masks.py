"""Boolean attention masks, True where a query may attend to a key, broadcastable to [B, H, Lq, Lk]."""
import jax.numpy as jnp


def padding_mask(tokens, pad_id: int = 0):
    """[B, L] tokens -> [B, 1, 1, L] mask of the non-pad keys."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(length: int):
    return jnp.tril(jnp.ones((length, length), dtype=bool))


def combine(mask, causal: bool, query_length: int, key_length: int):
    """One mask from an optional explicit mask and the causal flag; None when nothing is masked."""
    if causal:
        if query_length != key_length:
            raise ValueError(f"causal attention needs Lq == Lk, got {query_length} and {key_length}")
        causal_part = causal_mask(query_length)
        return causal_part if mask is None else jnp.logical_and(mask, causal_part)
    return mask


def key_padding(mask, batch: int, key_length: int):
    """The [B, Lk] key mask inside a key-padding mask of shape [B or 1, 1, 1, Lk], or None.

    Kernelised kinds honour a mask by zeroing phi(k) of masked keys, which can express key padding
    only; any mask that varies over heads or queries would need the Lq x Lk matrix, so it is refused.
    """
    if mask is None:
        return None
    mask = jnp.asarray(mask)
    if mask.ndim != 4 or mask.shape[1] != 1 or mask.shape[2] != 1:
        raise ValueError(
            f"kernelised attention honours key-padding masks of shape [B, 1, 1, Lk] only, got "
            f"{mask.shape}: a mask that depends on heads or queries cannot be applied in O(L)"
        )
    return jnp.broadcast_to(mask[:, 0, 0, :], (batch, key_length))
