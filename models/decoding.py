"""Greedy decoding and beam search with fixed shapes (one compilation for any output length), on the
models' incremental decoding protocol:

    state = model.init_decode_state(model.encode(source), source, max_len)   # caches, source memory
    logits, state = model.decode_step(token, index, state)                   # token [B] -> logits [B, V]

A step costs what one attention row costs (O(max_len) for softmax caches, O(1) for linear states), not a
re-run of the decoder over the whole buffer. Both searches return [B, max_len] tokens, PAD after EOS; the
special ids come from the caller (`SpecialIds`), as a model knows no vocabulary.
"""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct


class SpecialIds(NamedTuple):
    """The vocabulary's ids a search needs: the first input, the end of an output, and what follows it."""

    bos: int
    eos: int
    pad: int


@struct.dataclass
class DecodeState:
    """What a model carries between decoding steps: `carry`, a pytree whose arrays all lead with the
    batch axis (so beams are reordered by gathering rows), and the static buffer length `max_len`."""

    carry: Any
    max_len: int = struct.field(pytree_node=False)


class Greedy(NamedTuple):
    """The `while_loop` carry of greedy decoding."""

    step: jax.Array  # the position being decoded
    token: jax.Array  # [B] the last token fed
    state: DecodeState
    tokens: jax.Array  # [B, max_len] the output so far
    done: jax.Array  # [B] EOS produced


class Beams(NamedTuple):
    """The `while_loop` carry of beam search; beam j of sentence b is row b * beams + j of the model's batch."""

    step: jax.Array
    token: jax.Array  # [B * beams]
    state: DecodeState
    tokens: jax.Array  # [B, beams, max_len]
    scores: jax.Array  # [B, beams] log p of each hypothesis
    lengths: jax.Array  # [B, beams] tokens up to EOS
    finished: jax.Array  # [B, beams]


def greedy_decode(model, source, max_len: int, *, ids: SpecialIds):
    """[B, Ls] source -> [B, max_len] argmax tokens, ids.pad after each sequence's EOS; a `while_loop`
    stops as soon as every sequence has produced EOS."""
    batch = source.shape[0]

    def unfinished(carry: Greedy):
        return (carry.step < max_len) & ~jnp.all(carry.done)

    def next_token(carry: Greedy) -> Greedy:
        logits, state = model.decode_step(carry.token, carry.step, carry.state)
        token = jnp.where(carry.done, ids.pad, jnp.argmax(logits, -1)).astype(jnp.int32)
        tokens = jax.lax.dynamic_update_index_in_dim(carry.tokens, token, carry.step, axis=1)
        return Greedy(carry.step + 1, token, state, tokens, carry.done | (token == ids.eos))

    init = Greedy(jnp.int32(0), jnp.full((batch,), ids.bos, jnp.int32),
                  model.init_decode_state(model.encode(source), source, max_len),
                  jnp.full((batch, max_len), ids.pad, jnp.int32), jnp.zeros((batch,), bool))
    return jax.lax.while_loop(unfinished, next_token, init).tokens


def length_normaliser(length, alpha: float):
    """GNMT's length penalty ((5 + length) / 6)^alpha (Wu et al. 2016): a hypothesis ranks by
    log p / length_normaliser(length, alpha)."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(model, source, max_len: int, beam_size: int, length_penalty: float = 0.0, *, ids: SpecialIds):
    """[B, Ls] source -> [B, max_len] tokens of the best of `beam_size` hypotheses by
    log p / length_normaliser(length, length_penalty), length counting the tokens up to EOS (all max_len
    of them without EOS); ids.pad after EOS. beam_size 1 is greedy decoding.

    Each step ranks every continuation of every beam by its penalised score: an unfinished beam's by any
    token, a finished beam's only by PAD at no cost and its length unchanged, so it competes with the
    unfinished ones until better ones push it out. The best beam_size continue; the state rows are gathered
    from their parent beams. A `while_loop` stops when every beam has finished or at max_len.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    batch, beams = source.shape[0], beam_size
    state = model.init_decode_state(model.encode(source), source, max_len)
    state = jax.tree.map(lambda x: jnp.repeat(x, beams, axis=0), state)
    first_beam_only = jnp.where(jnp.arange(beams) == 0, 0.0, -jnp.inf)  # the others start as copies

    def unfinished(carry: Beams):
        return (carry.step < max_len) & ~jnp.all(carry.finished)

    def extend(carry: Beams) -> Beams:
        logits, state = model.decode_step(carry.token, carry.step, carry.state)
        vocab = logits.shape[-1]
        log_probs = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(batch, beams, vocab)
        stay = jnp.where(jnp.arange(vocab) == ids.pad, 0.0, -jnp.inf)
        log_probs = jnp.where(carry.finished[..., None], stay, log_probs)
        candidates = (carry.scores[..., None] + log_probs).reshape(batch, beams * vocab)
        lengths = jnp.where(carry.finished, carry.lengths, carry.step + 1)
        ranked = candidates / jnp.repeat(length_normaliser(lengths, length_penalty), vocab, axis=1)
        _, best = jax.lax.top_k(ranked, beams)
        parent, token = best // vocab, (best % vocab).astype(jnp.int32)
        from_parent = lambda x: jnp.take_along_axis(x, parent, axis=1)
        tokens = jax.lax.dynamic_update_index_in_dim(
            jnp.take_along_axis(carry.tokens, parent[..., None], axis=1), token, carry.step, axis=2)
        rows = (jnp.arange(batch)[:, None] * beams + parent).reshape(-1)
        return Beams(carry.step + 1, token.reshape(-1), jax.tree.map(lambda x: x[rows], state), tokens,
                     jnp.take_along_axis(candidates, best, axis=1), from_parent(lengths),
                     from_parent(carry.finished) | (token == ids.eos))

    init = Beams(jnp.int32(0), jnp.full((batch * beams,), ids.bos, jnp.int32), state,
                 jnp.full((batch, beams, max_len), ids.pad, jnp.int32), jnp.tile(first_beam_only, (batch, 1)),
                 jnp.zeros((batch, beams), jnp.int32), jnp.zeros((batch, beams), bool))
    return jax.lax.while_loop(unfinished, extend, init).tokens[:, 0]  # top_k sorts: beam 0 ranks first
