"""The translation task (tasks/interface.py): its config checks, data and vocabularies, the encoder-decoder,
its loss, teacher-forced metrics and the evaluation behind eval.json (greedy or beam decoding, BLEU, attention
ranks)."""
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import sacrebleu
from flax import nnx
from jax.experimental import multihost_utils

import attention
from data import files, paths, pipeline, scan, scan_grammar
from data.vocab import Vocabulary
from models import ROLES, EncoderDecoder, rnn
from models.decoding import SpecialIds, beam_search, greedy_decode
from training import evaluation, model_config, sharding
from training.config_checks import ConfigError, check_fields_read, check_file, check_int, choice
from training.losses import token_cross_entropy

NAME = "translation"
METRICS = ("exact_match", "token_accuracy", "bleu", "loss")
PROGRESS_METRIC = "token_accuracy"
MODELS = ("transformer", "rnn")  # model.name
SPECIAL_IDS = SpecialIds(bos=Vocabulary.BOS, eos=Vocabulary.EOS, pad=Vocabulary.PAD)
DATASETS = ("scan", "files")  # SCAN generated from its grammar, or parallel files (load_pairs)
# config_checks.check_fields_read: the fields only one dataset.name reads, and the defaults of those that have one.
DATASET_FIELDS = {"files": ("train_file", "test_file"), "scan": ("split",)}
DATASET_DEFAULTS = {"split": "simple"}


@dataclasses.dataclass
class TranslationData:
    source_vocab: Vocabulary
    target_vocab: Vocabulary
    train: dict  # name -> int32 [N, L] arrays from pipeline.encode_pairs
    validation: dict | None  # periodic evaluation; None when dataset.hold_out_validation is off
    test: dict  # only the final evaluation (eval.json) reads it
    test_pairs: list


def is_rnn(config) -> bool:
    return config.model.name == "rnn"


def roles(config) -> tuple[str, ...]:
    """The Transformer's three roles; the RNN attends from decoder states to encoder states only."""
    return ("cross",) if is_rnn(config) else ROLES


# The model fields one of translation's two models reads and the other does not (models/rnn.py's RecurrentSpec).
RNN_ONLY_FIELDS = ("model.cell", "model.bidirectional", "model.static_attention", "model.decoder_memory",
                   "model.memory_window")
TRANSFORMER_ONLY_FIELDS = ("model.mlp_dim", "model.positions", "model.qk_head_dim", "model.conv_kernel",
                           "model.conv_centered", "model.layer_kinds")


def unread_fields(config) -> tuple[str, ...]:
    """The model fields the chosen model does not read (train.py --print_config leaves them out)."""
    return TRANSFORMER_ONLY_FIELDS if is_rnn(config) else RNN_ONLY_FIELDS


def allowed_kinds(config) -> list[str]:
    """Every registered kind, and for the RNN also none (its baseline without attention)."""
    return attention.names() + ([rnn.NO_ATTENTION] if is_rnn(config) else [])


def check_config(config) -> None:
    """Translation's own fields: its model, the Transformer or the RNN, its data and its decoding."""
    choice("model.name", config.model.name, MODELS)
    choice("model.cell", config.model.cell, rnn.CELLS)
    _check_recurrent_attention(config)
    # The evaluation decodes: the decoder's attention, the Transformer's and the RNN's, runs step by step.
    model_config.check_incremental(config, tuple(role for role in roles(config) if role != "encoder_self"),
                                   "is decoded one position at a time")
    choice("dataset.name", config.dataset.name, DATASETS)
    check_fields_read(config, DATASET_FIELDS, DATASET_DEFAULTS)
    if config.dataset.name == "scan":
        choice("dataset.split", config.dataset.split, tuple(scan_grammar.SPLITS))
    else:
        for field in ("train_file", "test_file"):
            check_file(config, field)
    for field in ("max_source_len", "max_target_len"):
        check_int(config, f"dataset.{field}", 1)
    _check_decoding(config.eval)


def _check_recurrent_attention(config) -> None:
    """The RNN's attention forms (models/rnn.py); the Transformer leaves these fields alone."""
    choice("model.decoder_memory", config.model.decoder_memory, rnn.DECODER_MEMORIES)
    check_int(config, "model.memory_window", 1)
    if not is_rnn(config):
        for field, default in (("static_attention", False), ("decoder_memory", rnn.NO_MEMORY)):
            if config.model[field] != default:
                raise ConfigError(f"config.model.{field}={config.model[field]!r} applies to model.name='rnn' only")
        return
    if config.model.decoder_memory != rnn.NO_MEMORY:
        parts = 3 if config.model.decoder_memory == "key_value_predict" else 2
        if config.model.d_model % parts:
            raise ConfigError(f"config.model.decoder_memory={config.model.decoder_memory!r} splits each state in "
                              f"{parts}: config.model.d_model={config.model.d_model} must be divisible by {parts}")
    kind = model_config.role_kinds(config, roles(config))["cross"]
    if config.model.static_attention and kind in (rnn.NO_ATTENTION, "forced_forward"):
        raise ConfigError(f"config.model.static_attention=True shares one context between the decoder steps; "
                          f"config.attention.name={kind!r} cannot: choose a kind other than none and forced_forward")


def _check_decoding(eval_config) -> None:
    beam_size, alpha = eval_config.beam_size, eval_config.length_penalty
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ConfigError(f"config.eval.beam_size={beam_size!r} must be an integer >= 1 (1: greedy decoding)")
    if not 0 <= alpha < float("inf"):
        raise ConfigError(f"config.eval.length_penalty={alpha!r} must be a finite number >= 0 "
                          f"(the GNMT alpha; 0: no length penalty)")


def load_pairs(dataset) -> tuple[list, list, list]:
    """(train, validation, test) pairs. Validation is held out of the released training pairs
    (scan.hold_out_validation; an add_* split's primitive stays in training), or empty when
    dataset.hold_out_validation is off."""
    if dataset.name == "scan":
        train, test = scan.load_split(dataset.split, paths.data_dir(dataset.data_dir))
        primitive = scan_grammar.PRIMITIVE_OF_SPLIT.get(dataset.split)
        keep = (primitive,) if primitive else ()
    else:
        train, test = (files.read_parallel_file(path, dataset.max_source_len, dataset.max_target_len)
                       for path in (dataset.train_file, dataset.test_file))
        keep = ()
    if not dataset.hold_out_validation:
        return train, [], test
    train, validation = scan.hold_out_validation(train, keep)
    if not validation:
        raise ConfigError(
            f"config.dataset.hold_out_validation: none of the {len(train)} training commands falls in the "
            f"validation rule (CRC-32 0 mod 10); give more pairs or set it False")
    return train, validation, test


def _vocabulary(path: str, sentences) -> Vocabulary:
    """The workdir's saved vocabulary, so a resumed run and eval.py use the ids training used."""
    if os.path.exists(path):
        return Vocabulary.load(path)
    vocab = Vocabulary.build(sentences)
    vocab.save(path)
    return vocab


def prepare_data(config, workdir: str) -> TranslationData:
    train_pairs, validation_pairs, test_pairs = load_pairs(config.dataset)
    source_vocab = _vocabulary(os.path.join(workdir, "vocab_source.json"), (s for s, _ in train_pairs))
    target_vocab = _vocabulary(os.path.join(workdir, "vocab_target.json"), (t for _, t in train_pairs))
    # Lengths cover the test split too: the length split tests on longer outputs than it trains on.
    every_pair = train_pairs + validation_pairs + test_pairs
    source_len = max(len(s.split()) for s, _ in every_pair) + 1
    target_len = max(len(t.split()) for _, t in every_pair) + 1
    def encode(pairs):
        return pipeline.encode_pairs(pairs, source_vocab, target_vocab, source_len, target_len)
    validation = encode(validation_pairs) if validation_pairs else None
    return TranslationData(source_vocab, target_vocab, encode(train_pairs), validation, encode(test_pairs),
                           test_pairs)


def create_model(config, data: TranslationData):
    """The Transformer or, with model.name "rnn", the recurrent encoder-decoder."""
    params_key, dropout_key = jax.random.split(jax.random.key(config.seed))
    rngs = nnx.Rngs(params=params_key, dropout=dropout_key)
    vocab_sizes = len(data.source_vocab), len(data.target_vocab)
    if is_rnn(config):
        kinds = model_config.role_kinds(config, roles(config))
        options = model_config.kind_options(config, roles(config))
        spec = rnn.RecurrentSpec(
            num_layers=config.model.num_layers, hidden_dim=config.model.d_model, cell=config.model.cell,
            bidirectional=config.model.bidirectional, num_heads=config.model.num_heads,
            dropout_rate=config.model.dropout_rate, attention=kinds["cross"],
            attention_options=options.get(kinds["cross"], {}), tied_embeddings=config.model.tied_embeddings,
            static_attention=config.model.static_attention, decoder_memory=config.model.decoder_memory,
            memory_window=config.model.memory_window)
        return rnn.RecurrentEncoderDecoder(*vocab_sizes, spec, rngs=rngs, pad_id=Vocabulary.PAD)
    max_len = max(data.train["source"].shape[1], data.train["target"].shape[1])
    spec = model_config.transformer_spec(config, max_len, roles(config))
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
    gold prefix at every step (tests check the equivalence through the final evaluation's path).
    """
    target = batch["target"]
    weights = (target != Vocabulary.PAD).astype(jnp.float32)
    token_losses, hits = token_cross_entropy(model(batch["source"], batch["decoder_input"]), target,
                                             weights, label_smoothing)
    real_rows = weights[:, 0]
    sums = {
        "loss": token_losses.sum(),
        "tokens": weights.sum(),
        "correct_tokens": (hits * weights).sum(),
        "exact_sequences": (exact_rows(hits, target) * real_rows).sum(),
        "sequences": real_rows.sum(),
        "input_tokens": input_tokens(batch),
    }
    return sums["loss"] / jnp.maximum(sums["tokens"], 1.0), sums


def exact_rows(hits, target):
    """Rows whose tokens are all right up to and including the target's EOS, by token id: a PAD or BOS
    emitted before it makes the row wrong. `hits` [N, L] marks the right tokens (NumPy or JAX)."""
    return (hits | (target == Vocabulary.PAD)).all(axis=-1)


def summarize(sums: dict) -> dict:
    """Sums (added over batches or steps) -> the reported metrics."""
    return {
        "loss": float(sums["loss"] / max(sums["tokens"], 1.0)),
        "token_accuracy": float(sums["correct_tokens"] / max(sums["tokens"], 1.0)),
        "exact_match": float(sums["exact_sequences"] / max(sums["sequences"], 1.0)),
    }


def decoded_outputs(model, arrays: dict, eval_config) -> np.ndarray:
    """[N, target length] tokens decoded from `arrays["source"]` with the cache, greedy (eval.beam_size 1)
    or beam search, PAD after EOS; in batches padded and split over the devices the model is on, like
    evaluation.metric_totals."""
    model.eval()
    graphdef, state = nnx.split(model)
    max_len = arrays["target"].shape[1]
    mesh = sharding.mesh_of(state)

    def search(model, source):
        if eval_config.beam_size == 1:
            return greedy_decode(model, source, max_len, ids=SPECIAL_IDS)
        return beam_search(model, source, max_len, eval_config.beam_size, eval_config.length_penalty,
                           ids=SPECIAL_IDS)

    decode = jax.jit(lambda state, source: search(nnx.merge(graphdef, state), source))
    batches = pipeline.fixed_size_batches({"source": arrays["source"]},
                                          sharding.padded_batch_size(eval_config.batch_size, mesh))
    return np.concatenate([multihost_utils.process_allgather(
        decode(state, sharding.put_batch(batch, mesh)["source"]), tiled=True)[:real] for batch, real in batches])


def _forward(model, batch):
    return model(batch["source"], batch["decoder_input"])


def attention_analysis(config, workdir: str, model, data: TranslationData) -> dict:
    rows = evaluation.rank_sample(len(data.test_pairs), config.eval.rank_examples)
    batch = {name: array[rows] for name, array in data.test.items()}
    captured = evaluation.attention_weights(model, _forward, batch)
    weights = {role: captured[role] for role in ROLES if role in captured}  # JAX returns keys sorted
    source_len = (batch["source"] != Vocabulary.PAD).sum(1)
    target_len = (batch["decoder_input"] != Vocabulary.PAD).sum(1)
    query_len = {"encoder_self": source_len, "decoder_self": target_len, "cross": target_len}
    key_len = {"encoder_self": source_len, "decoder_self": target_len, "cross": source_len}
    source_tokens = [data.source_vocab.tokens[i] for i in batch["source"][0, : source_len[0]]]
    target_tokens = [data.target_vocab.tokens[i] for i in batch["decoder_input"][0, : target_len[0]]]
    tokens_q = {"encoder_self": source_tokens, "decoder_self": target_tokens, "cross": target_tokens}
    tokens_k = {"encoder_self": source_tokens, "decoder_self": target_tokens, "cross": source_tokens}
    return evaluation.attention_analysis(config, workdir, model, weights, query_len, key_len, tokens_q, tokens_k)


def final_metrics(config, model, data: TranslationData) -> dict:
    """eval.json's metrics: exact match of the decoded outputs by token id, BLEU of their strings,
    teacher-forced token accuracy and loss."""
    teacher_forced = summarize(evaluation.model_metric_totals(model, metric_sums, data.test, config.eval.batch_size))
    tokens, target = decoded_outputs(model, data.test, config.eval), data.test["target"]
    outputs = [data.target_vocab.decode(row) for row in tokens]  # without PAD and BOS: for BLEU only
    references = [reference for _, reference in data.test_pairs]
    return {
        "exact_match": float(exact_rows(tokens == target, target).mean()),
        "token_accuracy": teacher_forced["token_accuracy"],
        "bleu": sacrebleu.corpus_bleu(outputs, [references]).score,
        "loss": teacher_forced["loss"],
    }


def evaluate_model(config, workdir: str, model, data: TranslationData) -> evaluation.TaskEvaluation:
    """The whole test split's metrics (decoded and teacher-forced) and attention analysis."""
    source, target = data.test["source"].shape[1], data.test["target"].shape[1]
    # Over the longest source and target: the keys each role attends over.
    keys_attended = {"encoder_self": source, "decoder_self": target, "cross": source}
    return evaluation.TaskEvaluation("test", len(data.test_pairs), final_metrics(config, model, data),
                                     keys_attended, attention_analysis(config, workdir, model, data))


def report_sections(results: dict, spectra: dict, out_dir: str, head_dim: int | None) -> list[str]:
    from analysis import report  # SciPy and Matplotlib: for a study's report, not for a run's config check

    return report.rank_study_sections(METRICS, results, spectra, out_dir, head_dim)
