"""Encoder-only Transformer with a pooling head: one label per sequence (ListOps)."""
import jax
from flax import nnx

from attention import MultiHeadAttention, masks
from models import pooling
from models.transformer import Encoder, TransformerSpec


class SequenceClassifier(nnx.Module):
    """Tokens [B, L] -> (logits [B, num_classes], penalty [B]): the encoder, a pooling head
    (models/pooling.py) and an MLP, as in Long Range Arena's classifiers. `penalty` is the pooling head's
    (structured: its weighted ||A A^T - I||_F^2; else 0), for the loss to add."""

    def __init__(self, vocab_size: int, num_classes: int, spec: TransformerSpec, *, pooling_name: str,
                 pooling_hops: int, pooling_penalty: float, rngs: nnx.Rngs, pad_id: int = 0):
        self.pad_id = pad_id
        self.encoder = Encoder(vocab_size, spec, rngs=rngs)
        self.pooling = pooling.create(pooling_name, spec.d_model, hidden_dim=spec.mlp_dim, hops=pooling_hops,
                                      penalty=pooling_penalty, rngs=rngs)
        self.hidden = nnx.Linear(self.pooling.output_dim, spec.mlp_dim, rngs=rngs)
        self.logits = nnx.Linear(spec.mlp_dim, num_classes, rngs=rngs)

    def __call__(self, tokens):
        valid = tokens != self.pad_id
        x = self.encoder(tokens, masks.padding_mask(tokens, self.pad_id))
        pooled, penalty = self.pooling(x, valid)
        return self.logits(jax.nn.gelu(self.hidden(pooled))), penalty

    def attention_layers(self) -> dict[str, list[MultiHeadAttention]]:
        return {"encoder_self": [block.self_attention for block in self.encoder.blocks]}
