"""The MLM dataset of a config: the documents of each split (a pydoc corpus, a TFDS text dataset or text
files), the SentencePiece tokenizer learned from the training split and kept with the data, and the token
rows packed from them, the evaluation splits masked once (data/mlm.py)."""
import dataclasses
import hashlib
import os

import numpy as np
import tensorflow_datasets as tfds

from data import files, mlm, paths, text_corpus, tokenizer
from data.files import DataFileError, DatasetNotPreparedError

DATASETS = ("pydoc", "tfds", "text_files")  # dataset.name: where load_texts reads the documents
# Read by that name only (training/config_checks.check_fields_read), and the defaults of those that have one.
DATASET_FIELDS = {"text_files": ("train_file", "test_file"), "tfds": ("tfds_name", "text_key"), "pydoc": ("corpus",)}
DATASET_DEFAULTS = {"text_key": "text", "corpus": "stdlib"}


@dataclasses.dataclass
class MlmData:
    tokenizer: tokenizer.Tokenizer
    train: np.ndarray  # int32 [N, seq_len] packed token ids, masked afresh at every step
    validation: dict  # mlm.fixed_masking arrays: the same masked positions for every run
    test: dict
    masking: dict  # keyword arguments of mlm.mask_tokens


def _tfds_texts(dataset, split: str) -> list[str]:
    directory = paths.data_dir(dataset.data_dir)
    try:
        builder = tfds.builder(dataset.tfds_name, data_dir=directory)
    except tfds.core.registered.DatasetNotFoundError:
        raise DatasetNotPreparedError(f"config.dataset.tfds_name={dataset.tfds_name!r} is not a TFDS "
                                      f"dataset (see `tfds.list_builders()`)") from None
    if not builder.is_prepared():
        raise DatasetNotPreparedError(
            f"TFDS dataset {dataset.tfds_name!r} is not prepared under {directory!r}. Prepare it "
            f"once where its source can be downloaded: `tfds build {dataset.tfds_name} "
            f"--data_dir={directory} --file_format=array_record` (many TFDS builders need "
            f"TensorFlow to prepare, not to read), then copy {directory} here.")
    source = builder.as_data_source(split=split)
    if dataset.text_key not in builder.info.features:
        raise DataFileError(f"config.dataset.text_key={dataset.text_key!r} is not a feature of "
                            f"{dataset.tfds_name!r}; its features: {', '.join(builder.info.features)}")
    return [example[dataset.text_key].decode("utf-8") for example in source]


def load_texts(dataset, split: str) -> list[str]:
    """The documents of one split ("train", or the validation or test split name) of `dataset`."""
    if dataset.name == "pydoc":
        return text_corpus.load_documents(split, paths.data_dir(dataset.data_dir), dataset.corpus)
    if dataset.name == "tfds":
        return _tfds_texts(dataset, split)
    return files.read_documents(dataset.train_file if split == dataset.train_split else dataset.test_file)


def _tokenizer_path(dataset) -> str:
    """Next to the dataset: a vocabulary belongs to the training text it was learned from."""
    if dataset.name == "text_files":
        with open(dataset.train_file, "rb") as f:
            source = os.path.join("text_files", hashlib.sha256(f.read()).hexdigest()[:16])
    elif dataset.name == "pydoc":
        source = os.path.join("pydoc_corpus", text_corpus.config_name(dataset.corpus))
    else:
        source = dataset.tfds_name
    name = f"sentencepiece_{dataset.tokenizer}_{dataset.vocab_size}.model"
    return os.path.join(paths.data_dir(dataset.data_dir), source, name)


def prepare(dataset, masking_config) -> MlmData:
    """The data of `dataset` (config.dataset), masked at the rates of `masking_config` (config.mlm)."""
    train_texts = load_texts(dataset, dataset.train_split)
    tok = tokenizer.load_or_train(_tokenizer_path(dataset), lambda: train_texts, dataset.vocab_size,
                                  dataset.tokenizer)
    if tok.vocab_size < dataset.vocab_size:  # SentencePiece's limit is soft: a small text gives fewer pieces
        print(f"warning: {_tokenizer_path(dataset)} has {tok.vocab_size} pieces, fewer than "
              f"config.dataset.vocab_size={dataset.vocab_size}: the training text holds no more; the model "
              f"uses {tok.vocab_size} (eval.json: vocab_size)", flush=True)
    masking = {"vocab_size": tok.vocab_size, "mask_rate": masking_config.mask_rate,
               "mask_token_rate": masking_config.mask_token_rate,
               "random_token_rate": masking_config.random_token_rate,
               "max_predictions": mlm.default_max_predictions(dataset.seq_len, masking_config.mask_rate)}

    def packed(texts):
        return mlm.pack(tok.encode_batch(texts), dataset.seq_len)

    return MlmData(
        tokenizer=tok, train=packed(train_texts),
        validation=mlm.fixed_masking(packed(load_texts(dataset, dataset.validation_split)), **masking),
        test=mlm.fixed_masking(packed(load_texts(dataset, dataset.split)), **masking), masking=masking)
