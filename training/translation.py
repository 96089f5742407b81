"""The translation task: data and vocabularies, the encoder-decoder, its loss and teacher-forced metrics."""
import dataclasses
import os

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from data import files, pipeline, scan
from data.vocab import Vocabulary
from models import CAUSAL_ROLES, EncoderDecoder, TransformerSpec
from training import validate


@dataclasses.dataclass
class TranslationData:
    source_vocab: Vocabulary
    target_vocab: Vocabulary
    train: dict  # name -> int32 [N, L] arrays from pipeline.encode_pairs
    test: dict
    test_pairs: list


def load_pairs(dataset):
    if dataset.name == "scan":
        return scan.load_split(dataset.split, dataset.data_dir)
    return files.read_parallel_file(dataset.train_file), files.read_parallel_file(dataset.test_file)


def _vocabulary(path: str, sentences) -> Vocabulary:
    """The workdir's saved vocabulary, so a resumed run and eval.py use the ids training used."""
    if os.path.exists(path):
        return Vocabulary.load(path)
    vocab = Vocabulary.build(sentences)
    vocab.save(path)
    return vocab


def prepare_data(config, workdir: str) -> TranslationData:
    train_pairs, test_pairs = load_pairs(config.dataset)
    source_vocab = _vocabulary(os.path.join(workdir, "vocab_source.json"), (s for s, _ in train_pairs))
    target_vocab = _vocabulary(os.path.join(workdir, "vocab_target.json"), (t for _, t in train_pairs))
    # Lengths cover the test split too: the length split tests on longer outputs than it trains on.
    every_pair = train_pairs + test_pairs
    source_len = max(len(s.split()) for s, _ in every_pair) + 1
    target_len = max(len(t.split()) for _, t in every_pair) + 1
    def encode(pairs):
        return pipeline.encode_pairs(pairs, source_vocab, target_vocab, source_len, target_len)
    return TranslationData(source_vocab, target_vocab, encode(train_pairs), encode(test_pairs), test_pairs)


def create_model(config, data: TranslationData) -> EncoderDecoder:
    max_len = max(data.train["source"].shape[1], data.train["target"].shape[1])
    spec = TransformerSpec(
        num_layers=config.model.num_layers, d_model=config.model.d_model, num_heads=config.model.num_heads,
        mlp_dim=config.model.mlp_dim, dropout_rate=config.model.dropout_rate, max_len=max_len,
        positions=config.model.positions, tied_embeddings=config.model.tied_embeddings,
        attention=validate.role_kinds(config), attention_options=validate.kind_options(config))
    params_key, dropout_key = jax.random.split(jax.random.key(config.seed))
    return EncoderDecoder(len(data.source_vocab), len(data.target_vocab), spec,
                          rngs=nnx.Rngs(params=params_key, dropout=dropout_key), pad_id=Vocabulary.PAD)


def metric_sums(model, batch, label_smoothing: float = 0.0):
    """(mean training loss, sums over the batch's target tokens and sequences).

    `exact_sequences` counts rows whose every target token, EOS included, is the argmax under teacher
    forcing: exactly the rows that greedy decoding reproduces, since greedy decoding then sees the
    gold prefix at every step (tests check the equivalence against real decoding).
    """
    logits = model(batch["source"], batch["decoder_input"]).astype(jnp.float32)
    target = batch["target"]
    weights = (target != Vocabulary.PAD).astype(jnp.float32)
    one_hot = jnp.asarray(target[..., None] == jnp.arange(logits.shape[-1]), jnp.float32)
    smoothed = optax.smooth_labels(one_hot, label_smoothing) if label_smoothing else one_hot
    token_losses = optax.softmax_cross_entropy(logits, smoothed) * weights
    correct = (jnp.argmax(logits, -1) == target) | (target == Vocabulary.PAD)
    real_rows = weights[:, 0]
    sums = {
        "loss": token_losses.sum(),
        "tokens": weights.sum(),
        "correct_tokens": (correct * weights).sum(),
        "exact_sequences": (jnp.all(correct, -1) * real_rows).sum(),
        "sequences": real_rows.sum(),
    }
    return sums["loss"] / jnp.maximum(sums["tokens"], 1.0), sums


def summarize(sums: dict) -> dict:
    """Sums (added over batches or steps) -> the reported metrics."""
    return {
        "loss": float(sums["loss"] / max(sums["tokens"], 1.0)),
        "token_accuracy": float(sums["correct_tokens"] / max(sums["tokens"], 1.0)),
        "exact_match": float(sums["exact_sequences"] / max(sums["sequences"], 1.0)),
    }


def rank_bounds(model: EncoderDecoder) -> dict:
    """feature_dim of each role's kind where no causal mask lifts the bound; else None."""
    return {role: None if role in CAUSAL_ROLES else layers[0].feature_dim
            for role, layers in model.attention_layers().items()}
