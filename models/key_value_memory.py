"""Key-value(-predict) attention over the decoder's own recent states (Daniluk et al. 2017,
"Frustratingly Short Attention Spans in Neural Language Modeling").

An RNN decoder that attends over its own earlier outputs asks one vector h_t to do three jobs at once:
be the key that later steps score, the value they read, and the state the next token is predicted
from. Daniluk et al. split it instead: key-value attention reads h_t = [k_t; v_t], key-value-predict
h_t = [k_t; v_t; p_t], each part of size P. Step t scores the earlier keys additively,
e_tj = w^T tanh(W_y k_j + W_h k_t), reads r_t = sum_j softmax(e_t)_j v_j and outputs
h*_t = tanh(W_r r_t + W_x x_t), with x_t = v_t (key-value) or p_t (key-value-predict): the decoder's
width, so the rest of the decoder is unchanged.

Step t attends only to the `window` positions before it (t - window .. t - 1, not t itself), which
are what the paper found such a model to use anyway; padding positions inside the window drop out.
Decoding therefore keeps O(window) numbers per sequence, a ring buffer, not every earlier state.
"""
import jax
import jax.numpy as jnp
from flax import nnx

from attention.score_base import masked_softmax


class KeyValueMemory(nnx.Module):
    """Decoder states [B, Lt, hidden_dim] -> attended states [B, Lt, hidden_dim] (see the module)."""

    def __init__(self, hidden_dim: int, window: int, *, predict: bool, rngs: nnx.Rngs):
        parts = 3 if predict else 2
        if hidden_dim < parts or hidden_dim % parts:
            names = "key, value and prediction" if predict else "key and value"
            raise ValueError(f"model.d_model={hidden_dim}: key-value{'-predict' if predict else ''} memory "
                             f"splits each state into {names}; choose a positive multiple of {parts}")
        if window < 1:
            raise ValueError(f"model.memory_window={window}; choose a window of >= 1 earlier positions")
        part_dim = hidden_dim // parts
        self.parts, self.part_dim, self.window = parts, part_dim, window
        self.key_projection = nnx.Linear(part_dim, part_dim, use_bias=False, rngs=rngs)  # W_y
        self.query_projection = nnx.Linear(part_dim, part_dim, use_bias=False, rngs=rngs)  # W_h
        self.score_vector = nnx.Param(jax.random.normal(rngs.params(), (part_dim,)) * part_dim**-0.5)  # w
        self.read_projection = nnx.Linear(part_dim, hidden_dim, use_bias=False, rngs=rngs)  # W_r
        self.input_projection = nnx.Linear(part_dim, hidden_dim, rngs=rngs)  # W_x and the bias

    def _split(self, states):
        """[..., hidden_dim] -> key, value and the part the output is computed from, each [..., P]."""
        parts = jnp.split(states, self.parts, axis=-1)
        return parts[0], parts[1], parts[-1]

    def _scores(self, query_keys, hidden_keys):
        """w^T tanh(W_h k_t + W_y k_j): query keys [..., P] against hidden_keys = W_y k_j [..., K, P]
        -> float32 [..., K]."""
        hidden = jnp.tanh(self.query_projection(query_keys)[..., None, :] + hidden_keys)
        return (hidden @ self.score_vector[...]).astype(jnp.float32)

    def _output(self, weights, values, inputs):
        """tanh(W_r r + W_x x) with r = weights [..., K] . values [..., K, P]."""
        read = jnp.einsum("...k,...kp->...p", weights.astype(values.dtype), values)
        return jnp.tanh(self.read_projection(read) + self.input_projection(inputs))

    def __call__(self, states, valid):
        """states [B, Lt, hidden_dim], valid [B, Lt] bool -> [B, Lt, hidden_dim], every position at once.

        Each position gathers the `window` positions before it ([Lt, window] indices), so the scores
        are [B, Lt, window]: the tanh sits between query and key, and a full [B, Lt, Lt, P] hidden
        tensor would be mostly outside the window."""
        keys, values, inputs = self._split(states)
        positions = jnp.arange(states.shape[1])
        earlier = positions[:, None] - jnp.arange(1, self.window + 1)  # [Lt, window]; < 0 before the start
        in_sequence = earlier >= 0
        earlier = jnp.maximum(earlier, 0)
        allowed = in_sequence & valid[:, earlier]
        weights = masked_softmax(self._scores(keys, self.key_projection(keys)[:, earlier]), allowed)
        return self._output(weights, values[:, earlier], inputs)

    def init_state(self, batch: int, dtype=jnp.float32) -> dict:
        """The ring buffer of the last `window` keys and values [B, window, P] and which slots hold a
        real (non-padding) position [B, window]; nothing is valid before the first step."""
        return {"keys": jnp.zeros((batch, self.window, self.part_dim), dtype),
                "values": jnp.zeros((batch, self.window, self.part_dim), dtype),
                "valid": jnp.zeros((batch, self.window), bool)}

    def step(self, state, h, valid, index):
        """h [B, hidden_dim] at position `index` (valid [B]) -> (output [B, hidden_dim], state): row
        `index` of __call__ on the positions fed so far.

        The buffer holds positions index - window .. index - 1 in slot order position % window; the
        additive score ignores positions, so that order does not matter."""
        keys, values, inputs = self._split(h)
        weights = masked_softmax(self._scores(keys, self.key_projection(state["keys"])), state["valid"])
        output = self._output(weights, state["values"], inputs)
        slot = index % self.window
        state = {"keys": state["keys"].at[:, slot].set(keys.astype(state["keys"].dtype)),
                 "values": state["values"].at[:, slot].set(values.astype(state["values"].dtype)),
                 "valid": state["valid"].at[:, slot].set(valid)}
        return output, state
