"""Sequence models built from the attention registry."""
from models.classifier import SequenceClassifier
from models.language_model import LanguageModel
from models.mlm import MaskedLanguageModel
from models.transformer import CAUSAL_ROLES, ROLES, SELF_ROLES, EncoderDecoder, TransformerSpec

__all__ = ["CAUSAL_ROLES", "ROLES", "SELF_ROLES", "EncoderDecoder", "LanguageModel", "MaskedLanguageModel",
           "SequenceClassifier", "TransformerSpec"]
