"""Pre-LayerNorm Transformer encoder, decoder and encoder-decoder whose attention comes from the registry.

Attention kinds are chosen per role: `encoder_self`, `decoder_self` (causal) and `cross`; a self-attention
role may take one kind per layer instead (TransformerSpec.layer_kinds).
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention import MultiHeadAttention, masks
from models.decoding import DecodeState
from models.embeddings import embedding

ROLES = ("encoder_self", "decoder_self", "cross")
CAUSAL_ROLES = ("decoder_self",)
SELF_ROLES = ("encoder_self", "decoder_self")


@dataclasses.dataclass(frozen=True)
class TransformerSpec:
    num_layers: int
    d_model: int
    num_heads: int
    mlp_dim: int
    dropout_rate: float
    max_len: int  # longest sequence the position encoding covers
    positions: str = "sinusoidal"  # or "learned"
    tied_embeddings: bool = True
    qk_head_dim: int = 0  # width of each head's queries and keys; 0: d_model / num_heads, as the values
    conv_kernel: int = 0  # self-attention blocks of an Encoder: a depthwise convolution first; 0: none
    conv_centered: bool = False  # that convolution two-sided (odd conv_kernel), for a bidirectional role only
    attention: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(ROLES, "softmax"))
    layer_kinds: tuple = ()  # one kind per layer in every self-attention role (Based's interleaving); (): attention
    attention_options: dict = dataclasses.field(default_factory=dict)  # kind name -> its options


def sinusoidal_positions(length: int, d_model: int) -> np.ndarray:
    position = np.arange(length)[:, None]
    frequency = np.exp(-np.log(10_000.0) * np.arange(0, d_model, 2) / d_model)
    table = np.zeros((length, d_model), np.float32)
    table[:, 0::2] = np.sin(position * frequency)
    table[:, 1::2] = np.cos(position * frequency[: d_model // 2])
    return table


class Embedder(nnx.Module):
    """Token embedding scaled by sqrt(d_model) plus positions; `attend` gives tied output logits."""

    def __init__(self, vocab_size: int, spec: TransformerSpec, *, rngs: nnx.Rngs):
        self.tokens = embedding(vocab_size, spec.d_model, rngs=rngs)
        self.scale = spec.d_model**0.5
        if spec.positions == "learned":
            self.learned_positions = embedding(spec.max_len, spec.d_model, rngs=rngs)
        elif spec.positions == "sinusoidal":
            self.learned_positions = None
            self.sinusoids = sinusoidal_positions(spec.max_len, spec.d_model)
        else:
            raise ValueError(f"model.positions={spec.positions!r}; choose 'sinusoidal' or 'learned'")
        self.dropout = nnx.Dropout(spec.dropout_rate, rngs=rngs)

    def __call__(self, tokens):
        return self._embed(tokens, np.arange(tokens.shape[1]))

    def embed_at(self, tokens, index):
        """tokens [B] at position `index` (traced) -> [B, 1, d_model], as column `index` of __call__."""
        return self._embed(tokens[:, None], jnp.atleast_1d(index))

    def _embed(self, tokens, positions):
        if self.learned_positions is not None:
            position_vectors = self.learned_positions(positions)
        else:
            position_vectors = jnp.asarray(self.sinusoids)[positions]
        token_vectors = self.tokens(tokens)
        # The float32 table would otherwise promote a bfloat16 model's activations to float32 from here on.
        return self.dropout(token_vectors * self.scale + position_vectors.astype(token_vectors.dtype))

    def attend(self, x):
        return self.tokens.attend(x)


class ShortConvolution(nnx.Module):
    """Depthwise convolution over positions, [B, L, D] -> [B, L, D], zero beyond the sequence's ends.
    Causal: y_t = b + sum_j w_j * x_(t-j) for j < kernel_size. Centred (an odd kernel_size = 2c + 1):
    y_t = b + sum_j w_j * x_(t+c-j), the c positions on each side.

    Placed before self-attention (as Based and Zoology do), it lets each position carry its neighbours,
    so that "attend to the token that followed an earlier copy of me" (associative recall's induction
    step) takes one attention layer instead of two. In a bidirectional encoder the causal form hands each
    position its left neighbours only and leaves the right ones to attention; the centred form hands both.
    Weights start as PyTorch's Conv1d does, U(+-1/sqrt(kernel_size)).
    """

    def __init__(self, d_model: int, kernel_size: int, *, rngs: nnx.Rngs, centered: bool = False):
        if centered and kernel_size % 2 == 0:
            raise ValueError(f"a centred convolution needs an odd kernel size, not {kernel_size}")
        bound = kernel_size**-0.5
        self.kernel = nnx.Param(
            jax.random.uniform(rngs.params(), (kernel_size, d_model), minval=-bound, maxval=bound))
        self.bias = nnx.Param(jnp.zeros((d_model,)))
        self.centered = centered

    def __call__(self, x, valid=None):
        """valid [B, L]: the real positions. A centred convolution would read the padding after a sequence
        into its last positions, so padded inputs count as zeros (a causal one never reads later positions)."""
        kernel = self.kernel[...]
        size, length = kernel.shape[0], x.shape[1]
        if self.centered and valid is not None:
            x = jnp.where(valid[..., None], x, 0)
        after = size // 2 if self.centered else 0
        padded = jnp.pad(x, ((0, 0), (size - 1 - after, after), (0, 0)))
        # One shifted copy per tap (a few), not a loop over positions.
        taps = [kernel[j] * padded[:, size - 1 - j : size - 1 - j + length] for j in range(size)]
        return sum(taps) + self.bias[...]


class FeedForward(nnx.Module):
    def __init__(self, spec: TransformerSpec, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(spec.d_model, spec.mlp_dim, rngs=rngs)
        self.output = nnx.Linear(spec.mlp_dim, spec.d_model, rngs=rngs)
        self.dropout = nnx.Dropout(spec.dropout_rate, rngs=rngs)

    def __call__(self, x):
        return self.output(self.dropout(jax.nn.gelu(self.hidden(x))))


class Residual(nnx.Module):
    """x + dropout(sublayer(LayerNorm(x))): the pre-LN residual branch."""

    def __init__(self, spec: TransformerSpec, *, rngs: nnx.Rngs):
        self.norm = nnx.LayerNorm(spec.d_model, rngs=rngs)
        self.dropout = nnx.Dropout(spec.dropout_rate, rngs=rngs)

    def __call__(self, x, sublayer):
        return self.carrying(x, lambda h: (sublayer(h), None))[0]

    def carrying(self, x, sublayer):
        """The same for a sublayer that returns (output, carry), e.g. a decoding step and its cache."""
        out, carry = sublayer(self.norm(x))
        return x + self.dropout(out), carry


def _attention(spec: TransformerSpec, role: str, rngs: nnx.Rngs, layer: int) -> MultiHeadAttention:
    kind = spec.layer_kinds[layer] if spec.layer_kinds and role in SELF_ROLES else spec.attention[role]
    return MultiHeadAttention(kind, d_model=spec.d_model, num_heads=spec.num_heads, rngs=rngs,
                              kind_options=spec.attention_options.get(kind, {}),
                              qk_head_dim=spec.qk_head_dim or None)


def _feed_forward(spec: TransformerSpec, rngs: nnx.Rngs) -> FeedForward | None:
    """None when mlp_dim is 0: an attention-only block, as in Zoology's recall models."""
    return FeedForward(spec, rngs=rngs) if spec.mlp_dim else None


def _residual_if(present, spec: TransformerSpec, rngs: nnx.Rngs) -> Residual | None:
    return Residual(spec, rngs=rngs) if present is not None else None


def _apply_feed_forward(block, x):
    return x if block.feed_forward is None else block.feed_forward_branch(x, block.feed_forward)


class EncoderBlock(nnx.Module):
    """Self-attention in `role`: "encoder_self" sees every position, a causal role (CAUSAL_ROLES) the
    positions up to its own."""

    def __init__(self, spec: TransformerSpec, *, rngs: nnx.Rngs, role: str = "encoder_self", layer: int = 0):
        # Submodules in the order they were always created: an Rngs with a single stream draws the
        # parameters after each Dropout's fork of it, so the order decides a model's initial values.
        self.self_attention = _attention(spec, role, rngs, layer)
        self.causal = role in CAUSAL_ROLES
        if spec.conv_centered and self.causal:
            raise ValueError(f"a centred convolution reads later positions: not in the causal role {role}")
        self.convolution = (ShortConvolution(spec.d_model, spec.conv_kernel, rngs=rngs,
                                             centered=spec.conv_centered) if spec.conv_kernel else None)
        self.feed_forward = _feed_forward(spec, rngs)
        self.attention_branch = Residual(spec, rngs=rngs)
        self.feed_forward_branch = _residual_if(self.feed_forward, spec, rngs)

    def _attend(self, h, mask):
        if self.convolution is not None:
            h = self.convolution(h, masks.key_padding(mask, *h.shape[:2]))
        return self.self_attention(h, h, mask, causal=self.causal)

    def __call__(self, x, mask):
        x = self.attention_branch(x, lambda h: self._attend(h, mask))
        return _apply_feed_forward(self, x)


class DecoderBlock(nnx.Module):
    def __init__(self, spec: TransformerSpec, *, rngs: nnx.Rngs, layer: int = 0):
        self.self_attention = _attention(spec, "decoder_self", rngs, layer)
        self.cross_attention = _attention(spec, "cross", rngs, layer)
        self.feed_forward = _feed_forward(spec, rngs)
        self.self_branch = Residual(spec, rngs=rngs)
        self.cross_branch = Residual(spec, rngs=rngs)
        self.feed_forward_branch = _residual_if(self.feed_forward, spec, rngs)

    def __call__(self, x, encoded, self_mask, cross_mask):
        x = self.self_branch(x, lambda h: self.self_attention(h, h, self_mask, causal=True))
        x = self.cross_branch(x, lambda h: self.cross_attention(h, encoded, cross_mask))
        return _apply_feed_forward(self, x)

    def init_decode_state(self, encoded, key_mask, max_len: int):
        return {"self": self.self_attention.init_cache(encoded.shape[0], max_len, encoded.dtype),
                "cross": self.cross_attention.init_memory(encoded, key_mask, max_len)}

    def decode_step(self, x, state, key_mask, index, max_len: int, valid):
        """x [B, 1, d_model] at position `index` -> (output, state), as row `index` of __call__."""
        x, cache = self.self_branch.carrying(
            x, lambda h: self.self_attention.decode_step(h, state["self"], index, max_len, valid))
        x, memory = self.cross_branch.carrying(
            x, lambda h: self.cross_attention.attend_memory(h, state["cross"], key_mask, index, max_len))
        return _apply_feed_forward(self, x), {"self": cache, "cross": memory}


class Encoder(nnx.Module):
    """Embedding, a stack of self-attention blocks in `role` (EncoderBlock) and a final LayerNorm."""

    def __init__(self, vocab_size: int, spec: TransformerSpec, *, rngs: nnx.Rngs, role: str = "encoder_self"):
        self.role = role
        self.embedder = Embedder(vocab_size, spec, rngs=rngs)
        self.blocks = nnx.List([EncoderBlock(spec, rngs=rngs, role=role, layer=layer)
                                for layer in range(spec.num_layers)])
        self.norm = nnx.LayerNorm(spec.d_model, rngs=rngs)

    def __call__(self, tokens, mask):
        x = self.embedder(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x)


class EncoderDecoder(nnx.Module):
    """Source tokens [B, Ls] and decoder input [B, Lt] (bos-shifted target) -> logits [B, Lt, V]."""

    def __init__(self, source_vocab_size: int, target_vocab_size: int, spec: TransformerSpec, *,
                 rngs: nnx.Rngs, pad_id: int = 0):
        self.pad_id = pad_id
        self.encoder = Encoder(source_vocab_size, spec, rngs=rngs)
        self.target_embedder = Embedder(target_vocab_size, spec, rngs=rngs)
        self.decoder_blocks = nnx.List([DecoderBlock(spec, rngs=rngs, layer=layer) for layer in range(spec.num_layers)])
        self.decoder_norm = nnx.LayerNorm(spec.d_model, rngs=rngs)
        self.logits = None if spec.tied_embeddings else nnx.Linear(spec.d_model, target_vocab_size, rngs=rngs)

    def encode(self, source):
        return self.encoder(source, masks.padding_mask(source, self.pad_id))

    def decode(self, encoded, source, decoder_input):
        x = self.target_embedder(decoder_input)
        self_mask = masks.padding_mask(decoder_input, self.pad_id)
        cross_mask = masks.padding_mask(source, self.pad_id)
        for block in self.decoder_blocks:
            x = block(x, encoded, self_mask, cross_mask)
        return self._logits(x)

    def _logits(self, x):
        x = self.decoder_norm(x)
        return self.target_embedder.attend(x) if self.logits is None else self.logits(x)

    def __call__(self, source, decoder_input):
        return self.decode(self.encode(source), source, decoder_input)

    # --- incremental decoding (models/decoding.py): one target position per step ---------------------

    def init_decode_state(self, encoded, source, max_len: int) -> DecodeState:
        """Empty self-attention caches and the source projected once per layer for cross-attention."""
        key_mask = source != self.pad_id
        layers = tuple(block.init_decode_state(encoded, key_mask, max_len) for block in self.decoder_blocks)
        return DecodeState({"layers": layers, "key_mask": key_mask}, max_len)

    def decode_step(self, token, index, state: DecodeState):
        """token [B] at position `index` -> (logits [B, V] of the next token, state): row `index` of
        decode(encoded, source, buffer) for a `max_len` buffer holding the tokens fed so far."""
        key_mask, valid = state.carry["key_mask"], token != self.pad_id
        x = self.target_embedder.embed_at(token, index)
        layers = []
        for block, layer in zip(self.decoder_blocks, state.carry["layers"]):
            x, layer = block.decode_step(x, layer, key_mask, index, state.max_len, valid)
            layers.append(layer)
        return self._logits(x)[:, 0], state.replace(carry={"layers": tuple(layers), "key_mask": key_mask})

    def attention_layers(self) -> dict[str, list[MultiHeadAttention]]:
        """Every attention layer by role, in layer order (for weight capture and rank bounds)."""
        return {
            "encoder_self": [block.self_attention for block in self.encoder.blocks],
            "decoder_self": [block.self_attention for block in self.decoder_blocks],
            "cross": [block.cross_attention for block in self.decoder_blocks],
        }
