"""The masked-language-modelling task (see training/tasks.py): text, SentencePiece tokens packed into
fixed-length sequences, BERT masking, the encoder-only model, and the evaluation behind eval.json."""
import dataclasses
import hashlib
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow_datasets as tfds
from flax import nnx

from data import files, mlm, text_corpus, tokenizer
from data.files import DatasetNotPreparedError
from models import MaskedLanguageModel
from training import evaluate, validate
from training.losses import prediction_loss_and_accuracy, prediction_sums

PROGRESS_METRIC = "masked_accuracy"


@dataclasses.dataclass
class MlmData:
    tokenizer: tokenizer.Tokenizer
    train: np.ndarray  # int32 [N, seq_len] packed token ids, masked afresh at every step
    validation: dict  # mlm.fixed_masking arrays: the same masked positions for every run
    test: dict
    masking: dict  # keyword arguments of mlm.mask_tokens


def _tfds_texts(dataset, split: str) -> list[str]:
    try:
        builder = tfds.builder(dataset.tfds_name, data_dir=dataset.data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise DatasetNotPreparedError(f"config.dataset.tfds_name={dataset.tfds_name!r} is not a TFDS "
                                      f"dataset (see `tfds.list_builders()`)") from None
    if not builder.is_prepared():
        raise DatasetNotPreparedError(
            f"TFDS dataset {dataset.tfds_name!r} is not prepared under {dataset.data_dir!r}. Prepare it "
            f"once where its source can be downloaded: `tfds build {dataset.tfds_name} "
            f"--data_dir={dataset.data_dir} --file_format=array_record` (many TFDS builders need "
            f"TensorFlow to prepare, not to read), then copy {dataset.data_dir} here.")
    source = builder.as_data_source(split=split)
    if dataset.text_key not in builder.info.features:
        raise validate.ConfigError(f"config.dataset.text_key={dataset.text_key!r} is not a feature of "
                                   f"{dataset.tfds_name!r}; its features: {', '.join(builder.info.features)}")
    return [example[dataset.text_key].decode("utf-8") for example in source]


def load_texts(dataset, split: str) -> list[str]:
    """The documents of one split ("train", or the validation or test split name) of `dataset`."""
    if dataset.name == "pydoc":
        return text_corpus.load_documents(split, dataset.data_dir, dataset.corpus)
    if dataset.name == "tfds":
        return _tfds_texts(dataset, split)
    return files.read_documents(dataset.train_file if split == dataset.train_split else dataset.test_file)


def _tokenizer_path(dataset) -> str:
    """Next to the dataset: a vocabulary belongs to the training text it was learned from."""
    if dataset.name == "text_files":
        with open(dataset.train_file, "rb") as f:
            source = os.path.join("text_files", hashlib.sha256(f.read()).hexdigest()[:16])
    elif dataset.name == "pydoc" and dataset.corpus == "stdlib":
        source = "pydoc_corpus"  # the path the stdlib's vocabulary had before there were other corpora
    elif dataset.name == "pydoc":
        source = os.path.join("pydoc_corpus", dataset.corpus)
    else:
        source = dataset.tfds_name
    name = f"sentencepiece_{dataset.tokenizer}_{dataset.vocab_size}.model"
    return os.path.join(dataset.data_dir, source, name)


def prepare_data(config, workdir: str) -> MlmData:
    del workdir  # the tokenizer lives with the dataset, shared by every run on it
    dataset = config.dataset
    train_texts = load_texts(dataset, dataset.train_split)
    tok = tokenizer.load_or_train(_tokenizer_path(dataset), lambda: train_texts, dataset.vocab_size,
                                  dataset.tokenizer)
    if tok.vocab_size < dataset.vocab_size:  # SentencePiece's limit is soft: a small text gives fewer pieces
        print(f"warning: {_tokenizer_path(dataset)} has {tok.vocab_size} pieces, fewer than "
              f"config.dataset.vocab_size={dataset.vocab_size}: the training text holds no more; the model "
              f"uses {tok.vocab_size} (eval.json: vocab_size)", flush=True)
    masking = {"vocab_size": tok.vocab_size, "mask_rate": config.mlm.mask_rate,
               "mask_token_rate": config.mlm.mask_token_rate, "random_token_rate": config.mlm.random_token_rate,
               "max_predictions": mlm.default_max_predictions(dataset.seq_len, config.mlm.mask_rate)}

    def packed(texts):
        return mlm.pack(tok.encode_batch(texts), dataset.seq_len)

    return MlmData(
        tokenizer=tok, train=packed(train_texts),
        validation=mlm.fixed_masking(packed(load_texts(dataset, dataset.validation_split)), **masking),
        test=mlm.fixed_masking(packed(load_texts(dataset, dataset.split)), **masking), masking=masking)


def create_model(config, data: MlmData) -> MaskedLanguageModel:
    spec = validate.transformer_spec(config, config.dataset.seq_len)
    params_key, dropout_key = jax.random.split(jax.random.key(config.seed))
    return MaskedLanguageModel(data.tokenizer.vocab_size, spec,
                               rngs=nnx.Rngs(params=params_key, dropout=dropout_key), pad_id=tokenizer.PAD)


def train_batch(config, data: MlmData, batch_size: int, step: int) -> dict:
    return mlm.batch_at_step(data.train, batch_size, config.seed, step, **data.masking)


def input_tokens(batch):
    """The non-padding tokens the model reads: throughput's unit."""
    return (batch["inputs"] != tokenizer.PAD).sum(dtype=jnp.float32)


def metric_sums(model, batch, label_smoothing: float = 0.0):
    """(mean loss over the predicted positions, sums over them)."""
    return prediction_sums(model, batch, input_tokens(batch), label_smoothing)


def summarize(sums: dict) -> dict:
    loss, accuracy = prediction_loss_and_accuracy(sums)
    return {"masked_accuracy": accuracy, "loss": loss,
            "perplexity": math.exp(min(loss, 700.0))}  # exp overflows a float beyond ~709


def evaluate_model(config, workdir: str, model, data: MlmData, step: int) -> dict:
    """Masked-token metrics on the whole test split (fixed masking) and attention ranks -> eval.json."""
    totals = evaluate.model_metric_totals(model, metric_sums, data.test, config.eval.batch_size)
    return evaluate.write_eval_json(config, workdir, {
        "step": int(step),
        "task": "mlm",
        "split": config.dataset.split,
        "num_examples": int(len(data.test["inputs"])),
        "vocab_size": data.tokenizer.vocab_size,
        "attention": validate.role_kinds(config),
        "metrics": summarize(totals),
        "rank": evaluate.encoder_analysis(config, workdir, model, data.test["inputs"], tokenizer.PAD,
                                          lambda ids: [data.tokenizer.piece(int(i)) for i in ids]),
        "state": evaluate.attention_state(model, {"encoder_self": config.dataset.seq_len}),
    })
