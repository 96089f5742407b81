"""Encoder-only Transformer with a masked-language-modelling head."""
import jax
import jax.numpy as jnp
from flax import nnx

from attention import MultiHeadAttention, masks
from models.transformer import Encoder, TransformerSpec


class MaskedLanguageModel(nnx.Module):
    """Tokens [B, L] -> logits [B, P, V] at `positions` [B, P] (every position when None).

    The head is BERT's: a dense layer, GELU and LayerNorm, then the token embedding transposed (tied) or
    a separate projection, plus a per-token bias.
    """

    def __init__(self, vocab_size: int, spec: TransformerSpec, *, rngs: nnx.Rngs, pad_id: int = 0):
        self.pad_id = pad_id
        self.encoder = Encoder(vocab_size, spec, rngs=rngs)
        self.transform = nnx.Linear(spec.d_model, spec.d_model, rngs=rngs)
        self.transform_norm = nnx.LayerNorm(spec.d_model, rngs=rngs)
        self.logits = None if spec.tied_embeddings else nnx.Linear(spec.d_model, vocab_size, rngs=rngs)
        self.output_bias = nnx.Param(jnp.zeros((vocab_size,)))

    def __call__(self, tokens, positions=None):
        x = self.encoder(tokens, masks.padding_mask(tokens, self.pad_id))
        if positions is not None:  # the head runs on the predicted positions only
            x = jnp.take_along_axis(x, positions[..., None], axis=1)
        x = self.transform_norm(jax.nn.gelu(self.transform(x)))
        logits = self.encoder.embedder.attend(x) if self.logits is None else self.logits(x)
        return logits + self.output_bias[...]

    def attention_layers(self) -> dict[str, list[MultiHeadAttention]]:
        return {"encoder_self": [block.self_attention for block in self.encoder.blocks]}
