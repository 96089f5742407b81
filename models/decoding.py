"""Greedy decoding and beam search with fixed shapes (one compilation for any output length), on the
models' incremental decoding protocol:

    state = model.init_decode_state(model.encode(source), source, max_len)   # caches, source memory
    logits, state = model.decode_step(token, index, state)                   # token [B] -> logits [B, V]

A step costs what one attention row costs (O(max_len) for softmax caches, O(1) for linear states), not a
re-run of the decoder over the whole buffer. Both searches return [B, max_len] tokens, PAD after EOS.
"""
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from data.vocab import Vocabulary

BOS, EOS, PAD = Vocabulary.BOS, Vocabulary.EOS, Vocabulary.PAD


@struct.dataclass
class DecodeState:
    """What a model carries between decoding steps: `carry`, a pytree whose arrays all lead with the
    batch axis (so beams are reordered by gathering rows), and the static buffer length `max_len`."""

    carry: Any
    max_len: int = struct.field(pytree_node=False)


def greedy_decode(model, source, max_len: int):
    """[B, Ls] source -> [B, max_len] argmax tokens, PAD after each sequence's EOS; a `while_loop`
    stops as soon as every sequence has produced EOS."""
    batch = source.shape[0]

    def unfinished(carry):
        step, *_, done = carry
        return (step < max_len) & ~jnp.all(done)

    def next_token(carry):
        step, token, state, tokens, done = carry
        logits, state = model.decode_step(token, step, state)
        token = jnp.where(done, PAD, jnp.argmax(logits, -1)).astype(jnp.int32)
        tokens = jax.lax.dynamic_update_index_in_dim(tokens, token, step, axis=1)
        return step + 1, token, state, tokens, done | (token == EOS)

    init = (jnp.int32(0), jnp.full((batch,), BOS, jnp.int32),
            model.init_decode_state(model.encode(source), source, max_len),
            jnp.full((batch, max_len), PAD, jnp.int32), jnp.zeros((batch,), bool))
    return jax.lax.while_loop(unfinished, next_token, init)[3]


def length_normaliser(length, alpha: float):
    """GNMT's length penalty ((5 + length) / 6)^alpha (Wu et al. 2016): a hypothesis ranks by
    log p / length_normaliser(length, alpha)."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(model, source, max_len: int, beam_size: int, length_penalty: float = 0.0):
    """[B, Ls] source -> [B, max_len] tokens of the best of `beam_size` hypotheses by
    log p / length_normaliser(length, length_penalty), length counting the tokens up to EOS (all max_len
    of them without EOS); PAD after EOS. beam_size 1 is greedy decoding.

    The beams of sentence b are rows b * beam_size + j of the model's batch. Each step ranks every
    continuation of every beam by its penalised score: an unfinished beam's by any token, a finished
    beam's only by PAD at no cost and its length unchanged, so it competes with the unfinished ones
    until better ones push it out. The best beam_size continue; the state rows are gathered from
    their parent beams. A `while_loop` stops when every beam has finished or at max_len.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    batch, beams = source.shape[0], beam_size
    state = model.init_decode_state(model.encode(source), source, max_len)
    state = jax.tree.map(lambda x: jnp.repeat(x, beams, axis=0), state)
    first_beam_only = jnp.where(jnp.arange(beams) == 0, 0.0, -jnp.inf)  # the others start as copies

    def unfinished(carry):
        step, *_, finished = carry
        return (step < max_len) & ~jnp.all(finished)

    def extend(carry):
        step, token, state, tokens, scores, lengths, finished = carry
        logits, state = model.decode_step(token, step, state)
        vocab = logits.shape[-1]
        log_probs = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(batch, beams, vocab)
        stay = jnp.where(jnp.arange(vocab) == PAD, 0.0, -jnp.inf)
        log_probs = jnp.where(finished[..., None], stay, log_probs)
        candidates = (scores[..., None] + log_probs).reshape(batch, beams * vocab)
        lengths = jnp.where(finished, lengths, step + 1)
        ranked = candidates / jnp.repeat(length_normaliser(lengths, length_penalty), vocab, axis=1)
        _, best = jax.lax.top_k(ranked, beams)
        parent, token = best // vocab, (best % vocab).astype(jnp.int32)
        from_parent = lambda x: jnp.take_along_axis(x, parent, axis=1)
        finished = from_parent(finished) | (token == EOS)
        tokens = jax.lax.dynamic_update_index_in_dim(
            jnp.take_along_axis(tokens, parent[..., None], axis=1), token, step, axis=2)
        rows = (jnp.arange(batch)[:, None] * beams + parent).reshape(-1)
        state = jax.tree.map(lambda x: x[rows], state)
        return (step + 1, token.reshape(-1), state, tokens, jnp.take_along_axis(candidates, best, axis=1),
                from_parent(lengths), finished)

    init = (jnp.int32(0), jnp.full((batch * beams,), BOS, jnp.int32), state,
            jnp.full((batch, beams, max_len), PAD, jnp.int32), jnp.tile(first_beam_only, (batch, 1)),
            jnp.zeros((batch, beams), jnp.int32), jnp.zeros((batch, beams), bool))
    tokens = jax.lax.while_loop(unfinished, extend, init)[3]
    return tokens[:, 0]  # top_k sorts: beam 0 ranks first
