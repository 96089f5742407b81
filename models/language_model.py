"""A stack of self-attention blocks predicting tokens at chosen positions, with tied output embeddings:
causal, it is a decoder-only language model; bidirectional, an encoder predicting masked tokens."""
import jax.numpy as jnp
from flax import nnx

from attention import MultiHeadAttention
from models.transformer import Encoder, TransformerSpec


class LanguageModel(nnx.Module):
    """Tokens [B, L] -> logits [B, P, V] at `positions` [B, P] (every position when None).

    `role` is "decoder_self" (causal: position t sees positions <= t) or "encoder_self" (every
    position). Sequences are never padded: there is no padding mask. The output is the final
    LayerNorm's, projected on the token embeddings (tied, as Zoology's models).
    """

    def __init__(self, vocab_size: int, spec: TransformerSpec, *, rngs: nnx.Rngs, role: str):
        self.encoder = Encoder(vocab_size, spec, rngs=rngs, role=role)

    def __call__(self, tokens, positions=None):
        x = self.encoder(tokens, None)
        if positions is not None:  # logits only where something is predicted
            x = jnp.take_along_axis(x, positions[..., None], axis=1)
        return self.encoder.embedder.attend(x)

    def attention_layers(self) -> dict[str, list[MultiHeadAttention]]:
        return {self.encoder.role: [block.self_attention for block in self.encoder.blocks]}
