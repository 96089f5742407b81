"""Greedy autoregressive decoding with fixed shapes: one compilation for any output length."""
import jax
import jax.numpy as jnp

from data.vocab import Vocabulary

BOS, EOS, PAD = Vocabulary.BOS, Vocabulary.EOS, Vocabulary.PAD


def greedy_decode(model, source, max_len: int):
    """[B, Ls] source -> [B, max_len] tokens, PAD after each sequence's EOS.

    The decoder re-reads the whole fixed-size buffer at each step: causality makes positions past t
    irrelevant, and a `while_loop` stops as soon as every sequence has produced EOS.
    """
    batch = source.shape[0]
    encoded = model.encode(source)
    buffer = jnp.full((batch, max_len + 1), PAD, jnp.int32).at[:, 0].set(BOS)

    def unfinished(carry):
        step, _, done = carry
        return (step < max_len) & ~jnp.all(done)

    def next_token(carry):
        step, buffer, done = carry
        logits = model.decode(encoded, source, buffer[:, :-1])
        token = jnp.argmax(jax.lax.dynamic_index_in_dim(logits, step, axis=1, keepdims=False), -1)
        token = jnp.where(done, PAD, token).astype(jnp.int32)
        buffer = jax.lax.dynamic_update_index_in_dim(buffer, token, step + 1, axis=1)
        return step + 1, buffer, done | (token == EOS)

    init = (jnp.int32(0), buffer, jnp.zeros((batch,), bool))
    _, buffer, _ = jax.lax.while_loop(unfinished, next_token, init)
    return buffer[:, 1:]
