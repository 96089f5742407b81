"""The translation task (see training/tasks.py): data and vocabularies, the encoder-decoder, its loss,
teacher-forced metrics and the evaluation behind eval.json (greedy or beam decoding, BLEU, attention ranks)."""
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import sacrebleu
from flax import nnx

from data import files, pipeline, scan
from data.vocab import Vocabulary
from models import ROLES, EncoderDecoder
from models.decoding import beam_search, greedy_decode
from models.rnn import RecurrentEncoderDecoder, RecurrentSpec
from training import evaluate, validate
from training.losses import token_cross_entropy

PROGRESS_METRIC = "token_accuracy"


@dataclasses.dataclass
class TranslationData:
    source_vocab: Vocabulary
    target_vocab: Vocabulary
    train: dict  # name -> int32 [N, L] arrays from pipeline.encode_pairs
    test: dict
    test_pairs: list

    @property
    def validation(self):  # SCAN has no validation split: training follows the test split
        return self.test


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


def create_model(config, data: TranslationData):
    """The Transformer or, with model.name "rnn", the recurrent encoder-decoder."""
    params_key, dropout_key = jax.random.split(jax.random.key(config.seed))
    rngs = nnx.Rngs(params=params_key, dropout=dropout_key)
    vocab_sizes = len(data.source_vocab), len(data.target_vocab)
    if config.model.name == "rnn":
        kinds, options = validate.role_kinds(config), validate.kind_options(config)
        spec = RecurrentSpec(
            num_layers=config.model.num_layers, hidden_dim=config.model.d_model, cell=config.model.cell,
            bidirectional=config.model.bidirectional, num_heads=config.model.num_heads,
            dropout_rate=config.model.dropout_rate, attention=kinds["cross"],
            attention_options=options.get(kinds["cross"], {}), tied_embeddings=config.model.tied_embeddings)
        return RecurrentEncoderDecoder(*vocab_sizes, spec, rngs=rngs, pad_id=Vocabulary.PAD)
    max_len = max(data.train["source"].shape[1], data.train["target"].shape[1])
    spec = validate.transformer_spec(config, max_len)
    return EncoderDecoder(*vocab_sizes, spec, rngs=rngs, pad_id=Vocabulary.PAD)


def train_batch(config, data: TranslationData, batch_size: int, step: int) -> dict:
    return pipeline.batch_at_step(data.train, batch_size, config.seed, step)


def input_tokens(batch):
    """The non-padding tokens the model reads (source and decoder input): throughput's unit."""
    return sum((batch[name] != Vocabulary.PAD).sum(dtype=jnp.float32) for name in ("source", "decoder_input"))


def metric_sums(model, batch, label_smoothing: float = 0.0):
    """(mean training loss, sums over the batch's target tokens and sequences).

    `exact_sequences` counts rows whose every target token, EOS included, is the argmax under teacher
    forcing: exactly the rows that greedy decoding reproduces, since greedy decoding then sees the
    gold prefix at every step (tests check the equivalence against real decoding).
    """
    target = batch["target"]
    weights = (target != Vocabulary.PAD).astype(jnp.float32)
    token_losses, hits = token_cross_entropy(model(batch["source"], batch["decoder_input"]), target,
                                             weights, label_smoothing)
    correct = hits | (target == Vocabulary.PAD)
    real_rows = weights[:, 0]
    sums = {
        "loss": token_losses.sum(),
        "tokens": weights.sum(),
        "correct_tokens": (correct * weights).sum(),
        "exact_sequences": (jnp.all(correct, -1) * real_rows).sum(),
        "sequences": real_rows.sum(),
        "input_tokens": input_tokens(batch),
    }
    return sums["loss"] / jnp.maximum(sums["tokens"], 1.0), sums


def summarize(sums: dict) -> dict:
    """Sums (added over batches or steps) -> the reported metrics."""
    return {
        "loss": float(sums["loss"] / max(sums["tokens"], 1.0)),
        "token_accuracy": float(sums["correct_tokens"] / max(sums["tokens"], 1.0)),
        "exact_match": float(sums["exact_sequences"] / max(sums["sequences"], 1.0)),
    }


def decoded_outputs(model, data: TranslationData, eval_config) -> list[str]:
    """The test outputs, decoded with the cache: greedy (eval.beam_size 1) or beam search."""
    model.eval()
    graphdef, state = nnx.split(model)
    max_len = data.test["target"].shape[1]

    def search(model, source):
        if eval_config.beam_size == 1:
            return greedy_decode(model, source, max_len)
        return beam_search(model, source, max_len, eval_config.beam_size, eval_config.length_penalty)

    decode = jax.jit(lambda state, source: search(nnx.merge(graphdef, state), source))
    outputs = []
    for batch, real in pipeline.fixed_size_batches(data.test, eval_config.batch_size):
        tokens = jax.device_get(decode(state, batch["source"]))[:real]
        outputs.extend(data.target_vocab.decode(row) for row in tokens)
    return outputs


def _forward(model, batch):
    return model(batch["source"], batch["decoder_input"])


def attention_analysis(config, workdir: str, model, data: TranslationData) -> list:
    rows = evaluate.rank_sample(len(data.test_pairs), config.eval.rank_examples)
    batch = {name: array[rows] for name, array in data.test.items()}
    captured = evaluate.attention_weights(model, _forward, batch)
    weights = {role: captured[role] for role in ROLES if role in captured}  # JAX returns keys sorted
    source_len = (batch["source"] != Vocabulary.PAD).sum(1)
    target_len = (batch["decoder_input"] != Vocabulary.PAD).sum(1)
    query_len = {"encoder_self": source_len, "decoder_self": target_len, "cross": target_len}
    key_len = {"encoder_self": source_len, "decoder_self": target_len, "cross": source_len}
    source_tokens = [data.source_vocab.tokens[i] for i in batch["source"][0, : source_len[0]]]
    target_tokens = [data.target_vocab.tokens[i] for i in batch["decoder_input"][0, : target_len[0]]]
    tokens_q = {"encoder_self": source_tokens, "decoder_self": target_tokens, "cross": target_tokens}
    tokens_k = {"encoder_self": source_tokens, "decoder_self": target_tokens, "cross": source_tokens}
    return evaluate.attention_analysis(config, workdir, model, weights, query_len, key_len, tokens_q, tokens_k)


def evaluate_model(config, workdir: str, model, data: TranslationData, step: int) -> dict:
    """Evaluates on the whole test split and writes `eval.json` in the workdir; returns its content."""
    metrics = summarize(evaluate.model_metric_totals(model, metric_sums, data.test, config.eval.batch_size))
    outputs = decoded_outputs(model, data, config.eval)
    references = [target for _, target in data.test_pairs]
    return evaluate.write_eval_json(workdir, {
        "step": int(step),
        "task": "translation",
        "split": "test",
        "num_examples": len(references),
        "attention": validate.role_kinds(config),
        "metrics": {
            "exact_match": float(np.mean([o == r for o, r in zip(outputs, references)])),
            "token_accuracy": metrics["token_accuracy"],
            "bleu": sacrebleu.corpus_bleu(outputs, [references]).score,
            "loss": metrics["loss"],
        },
        "rank": attention_analysis(config, workdir, model, data),
        # Over the longest source and target: the keys each role attends over.
        "state": evaluate.attention_state(model, {"encoder_self": data.test["source"].shape[1],
                                                  "decoder_self": data.test["target"].shape[1],
                                                  "cross": data.test["source"].shape[1]}),
    })
