"""Sequence models built from the attention registry."""
from models.transformer import CAUSAL_ROLES, ROLES, EncoderDecoder, TransformerSpec

__all__ = ["CAUSAL_ROLES", "ROLES", "EncoderDecoder", "TransformerSpec"]
