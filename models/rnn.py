"""Recurrent encoder-decoder (LSTM or GRU) with attention over the encoder states, Luong style.

The decoder's top-layer states are the queries, the encoder states the keys and values; any registered
kind serves (dot, multiplicative, additive, local, local_predictive, hard, ...), or "none": the decoder
then sees the source only through the encoder's final state, the classic lower bound. Without Luong's
input feeding the recurrence does not depend on attention, so the attention of every decoder step is one
parallel call: the same matrices the Transformer's cross-attention yields, for rank analysis.

Every recurrence is one `jax.lax.scan` over time; padded positions leave the state unchanged, so a
sequence's final state is the one after its last real token, and the backward direction starts there.
"""
import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from attention import MultiHeadAttention
from models.decoding import DecodeState
from models.embeddings import embedding
from models.key_value_memory import KeyValueMemory

NO_ATTENTION = "none"
CELLS = ("lstm", "gru")
NO_MEMORY = "none"
DECODER_MEMORIES = (NO_MEMORY, "key_value", "key_value_predict")


@dataclasses.dataclass(frozen=True)
class RecurrentSpec:
    num_layers: int
    hidden_dim: int
    cell: str = "lstm"
    bidirectional: bool = True  # encoder only: the decoder runs left to right
    num_heads: int = 1  # of the attention over the encoder states
    dropout_rate: float = 0.0
    attention: str = "multiplicative"  # a registered kind, or "none"
    attention_options: dict = dataclasses.field(default_factory=dict)
    tied_embeddings: bool = True
    # Static attention: one query, the encoder's final state, and so one context for every decoder step.
    static_attention: bool = False
    # The decoder's attention over its own last `memory_window` states (models/key_value_memory.py):
    # "none", "key_value" or "key_value_predict".
    decoder_memory: str = "none"
    memory_window: int = 5


class LSTMCell(nnx.Module):
    """(h, c) -> (h', c'): i, f, g, o = W x + U h + b; c' = s(f) c + s(i) tanh(g); h' = s(o) tanh(c')."""

    def __init__(self, in_features: int, hidden_dim: int, *, rngs: nnx.Rngs):
        self.input = nnx.Linear(in_features, 4 * hidden_dim, rngs=rngs)
        self.recurrent = nnx.Linear(hidden_dim, 4 * hidden_dim, use_bias=False, rngs=rngs,
                                    kernel_init=nnx.initializers.orthogonal())
        self.hidden_dim = hidden_dim

    def initial_state(self, batch: int):
        return (jnp.zeros((batch, self.hidden_dim)),) * 2

    def __call__(self, state, x):
        h, c = state
        i, f, g, o = jnp.split(self.input(x) + self.recurrent(h), 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c


class GRUCell(nnx.Module):
    """(h,) -> (h',): r, z = s(W x + U h + b); n = tanh(W_n x + r (U_n h + b_n)); h' = (1 - z) n + z h."""

    def __init__(self, in_features: int, hidden_dim: int, *, rngs: nnx.Rngs):
        self.input = nnx.Linear(in_features, 3 * hidden_dim, rngs=rngs)
        self.recurrent = nnx.Linear(hidden_dim, 3 * hidden_dim, rngs=rngs,
                                    kernel_init=nnx.initializers.orthogonal())
        self.hidden_dim = hidden_dim

    def initial_state(self, batch: int):
        return (jnp.zeros((batch, self.hidden_dim)),)

    def __call__(self, state, x):
        (h,) = state
        x_r, x_z, x_n = jnp.split(self.input(x), 3, axis=-1)
        h_r, h_z, h_n = jnp.split(self.recurrent(h), 3, axis=-1)
        r, z = jax.nn.sigmoid(x_r + h_r), jax.nn.sigmoid(x_z + h_z)
        return ((1 - z) * jnp.tanh(x_n + r * h_n) + z * h,)


def _check_static(spec: RecurrentSpec) -> bool:
    # forced_forward's weights change from step to step by construction, whatever the query.
    if spec.static_attention and spec.attention in (NO_ATTENTION, "forced_forward"):
        raise ValueError(f"model.static_attention=True shares one attention context between the decoder steps; "
                         f"attention {spec.attention!r} cannot: use a kind other than none and forced_forward")
    return spec.static_attention


def _memory(spec: RecurrentSpec, rngs: nnx.Rngs) -> KeyValueMemory | None:
    if spec.decoder_memory not in DECODER_MEMORIES:
        raise ValueError(f"model.decoder_memory={spec.decoder_memory!r}; choose one of: {', '.join(DECODER_MEMORIES)}")
    if spec.decoder_memory == NO_MEMORY:
        return None
    return KeyValueMemory(spec.hidden_dim, spec.memory_window, predict=spec.decoder_memory == "key_value_predict",
                          rngs=rngs)


def _static_query(initial_states, length: int):
    """The encoder's summary, the top layer's final state (both directions bridged): one query [B, length, H]
    repeated for every decoder step, so the attention matrix has identical rows."""
    summary = initial_states[-1][0]
    return jnp.broadcast_to(summary[:, None], (summary.shape[0], length, summary.shape[1]))


def _cell(spec: RecurrentSpec, in_features: int, rngs: nnx.Rngs):
    if spec.cell not in CELLS:
        raise ValueError(f"model.cell={spec.cell!r}; choose one of: {', '.join(CELLS)}")
    return (LSTMCell if spec.cell == "lstm" else GRUCell)(in_features, spec.hidden_dim, rngs=rngs)


def cell_step(cell, state, x, valid):
    """One step of `cell` on x [B, D] -> (state, hidden [B, H]); where valid [B] is False the state is
    carried unchanged and the hidden output is zero."""
    new = cell(state, x)
    state = tuple(jnp.where(valid[:, None], n, s) for n, s in zip(new, state))
    return state, state[0] * valid[:, None]


def recur(cell, inputs, valid, state, *, reverse: bool = False):
    """Runs `cell` over inputs [B, L, D] -> (hidden states [B, L, H], zero where not valid; final state).

    One `lax.scan` over time. Where valid [B, L] is False the state is carried unchanged.
    """
    def step(state, x_and_valid):
        return cell_step(cell, state, *x_and_valid)

    time_major = (jnp.swapaxes(inputs, 0, 1), jnp.swapaxes(valid, 0, 1))
    final, outputs = jax.lax.scan(step, state, time_major, reverse=reverse)
    return jnp.swapaxes(outputs, 0, 1), final


class RecurrentEncoder(nnx.Module):
    """Tokens [B, L] -> (states [B, L, hidden_dim], per layer the decoder's initial state)."""

    def __init__(self, vocab_size: int, spec: RecurrentSpec, *, rngs: nnx.Rngs):
        hidden, directions = spec.hidden_dim, 2 if spec.bidirectional else 1
        self.embed = embedding(vocab_size, hidden, rngs=rngs)
        self.dropout = nnx.Dropout(spec.dropout_rate, rngs=rngs)
        widths = [hidden] + [directions * hidden] * (spec.num_layers - 1)
        self.forward_cells = nnx.List([_cell(spec, width, rngs) for width in widths])
        self.backward_cells = nnx.List([_cell(spec, width, rngs) for width in widths]
                                       if spec.bidirectional else [])
        # Both directions' states and final states, brought to the decoder's width.
        self.states_bridge = nnx.Linear(directions * hidden, hidden, rngs=rngs) if spec.bidirectional else None
        self.final_bridge = nnx.Linear(directions * hidden, hidden, rngs=rngs) if spec.bidirectional else None

    def __call__(self, tokens, valid):
        x = self.dropout(self.embed(tokens))
        initial_states = []
        for layer, forward_cell in enumerate(self.forward_cells):
            outputs, final = recur(forward_cell, x, valid, forward_cell.initial_state(x.shape[0]))
            if self.backward_cells:
                backward_cell = self.backward_cells[layer]
                backward, backward_final = recur(backward_cell, x, valid,
                                                 backward_cell.initial_state(x.shape[0]), reverse=True)
                outputs = jnp.concatenate([outputs, backward], axis=-1)
                final = tuple(jnp.tanh(self.final_bridge(jnp.concatenate(pair, axis=-1)))
                              for pair in zip(final, backward_final))
            initial_states.append(final)
            x = outputs
        states = x if self.states_bridge is None else self.states_bridge(x)
        return states, tuple(initial_states)


class RecurrentEncoderDecoder(nnx.Module):
    """Source [B, Ls] and decoder input [B, Lt] (bos-shifted target) -> logits [B, Lt, V], with the
    encode / decode split and the decoding protocol (init_decode_state, decode_step) of the
    Transformer, so one greedy decoding and one beam search serve both: the decoding state is the
    cells' carry and the encoder states projected once for the attention."""

    def __init__(self, source_vocab_size: int, target_vocab_size: int, spec: RecurrentSpec, *,
                 rngs: nnx.Rngs, pad_id: int = 0):
        hidden = spec.hidden_dim
        self.pad_id = pad_id
        self.encoder = RecurrentEncoder(source_vocab_size, spec, rngs=rngs)
        self.target_embed = embedding(target_vocab_size, hidden, rngs=rngs)
        self.dropout = nnx.Dropout(spec.dropout_rate, rngs=rngs)
        self.decoder_cells = nnx.List([_cell(spec, hidden, rngs) for _ in range(spec.num_layers)])
        self.attention = None if spec.attention == NO_ATTENTION else MultiHeadAttention(
            spec.attention, d_model=hidden, num_heads=spec.num_heads, rngs=rngs,
            kind_options=spec.attention_options)
        self.static_attention = _check_static(spec)
        self.memory = _memory(spec, rngs)
        # Luong's attentional state tanh(W_c [context; h]).
        self.combine = None if self.attention is None else nnx.Linear(2 * hidden, hidden, rngs=rngs)
        self.logits = None if spec.tied_embeddings else nnx.Linear(hidden, target_vocab_size, rngs=rngs)

    def encode(self, source):
        return self.encoder(source, source != self.pad_id)

    def decode(self, encoded, source, decoder_input):
        states, initial_states = encoded
        x = self.dropout(self.target_embed(decoder_input))
        valid = decoder_input != self.pad_id
        for cell, initial in zip(self.decoder_cells, initial_states):
            x, _ = recur(cell, x, valid, initial)
        if self.memory is not None:
            x = self.memory(x, valid)
        if self.attention is None:
            return self._logits(x, None)
        queries = _static_query(initial_states, x.shape[1]) if self.static_attention else x
        return self._logits(x, self.attention(queries, states, (source != self.pad_id)[:, None, None, :]))

    def _logits(self, x, context):
        """Logits of the top decoder states x [B, Lt, H] and their attention context (None: no attention)."""
        if context is not None:
            x = jnp.tanh(self.combine(jnp.concatenate([context, x], axis=-1)))
        x = self.dropout(x)
        return self.target_embed.attend(x) if self.logits is None else self.logits(x)

    def init_decode_state(self, encoded, source, max_len: int) -> DecodeState:
        """The cells' carry, the decoder memory's window, and the source projected once for attention (with
        static attention its one context instead)."""
        states, initial_states = encoded
        key_mask = source != self.pad_id
        carry = {"cells": initial_states, "key_mask": key_mask}
        if self.memory is not None:
            carry["decoder_memory"] = self.memory.init_state(source.shape[0], states.dtype)
        if self.static_attention:
            carry["context"] = self.attention(_static_query(initial_states, 1), states, key_mask[:, None, None, :])
        elif self.attention is not None:
            carry["memory"] = self.attention.init_memory(states, key_mask, max_len)
        return DecodeState(carry, max_len)

    def decode_step(self, token, index, state: DecodeState):
        """token [B] at position `index` -> (logits [B, V], state), as row `index` of decode()."""
        carry, valid = dict(state.carry), token != self.pad_id
        x = self.dropout(self.target_embed(token))
        cells = []
        for cell, cell_state in zip(self.decoder_cells, carry["cells"]):
            cell_state, x = cell_step(cell, cell_state, x, valid)
            cells.append(cell_state)
        carry["cells"] = tuple(cells)
        if self.memory is not None:
            x, carry["decoder_memory"] = self.memory.step(carry["decoder_memory"], x, valid, index)
        x, context = x[:, None], carry.get("context")
        if "memory" in carry:
            context, carry["memory"] = self.attention.attend_memory(x, carry["memory"], carry["key_mask"], index,
                                                                    state.max_len)
        return self._logits(x, context)[:, 0], state.replace(carry=carry)

    def __call__(self, source, decoder_input):
        return self.decode(self.encode(source), source, decoder_input)

    def attention_layers(self) -> dict[str, list[MultiHeadAttention]]:
        return {} if self.attention is None else {"cross": [self.attention]}
