"""SentencePiece subword tokenizer with fixed ids for padding, unknown pieces, document ends and [MASK]."""

import io
import os
import re
from collections.abc import Callable, Iterable

import sentencepiece as spm

from data.files import DataFileError
from runtime import atomic, locks

PAD, UNK, EOS, MASK = 0, 1, 2, 3
NUM_SPECIAL = 4  # ids below this are never drawn as random replacement tokens
MASK_PIECE = "[MASK]"
MODEL_TYPES = ("unigram", "bpe")
# SentencePiece skips a longer line (and fails, "sentences_.empty()", when every line is one): a longer line
# is cut into sentences of at most this many bytes, at spaces where it has some.
MAX_SENTENCE_BYTES = 4192


def train_sentencepiece(texts: list[str], model_path: str, vocab_size: int, model_type: str = "unigram"):
    """Trains a model on the non-empty lines of texts and writes it to model_path.

    Same texts, same bytes: the input is neither sampled nor shuffled and training runs on one thread.
    The vocabulary size is a soft limit, so a corpus too small for it still trains (to fewer pieces).
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type={model_type!r} is not supported; choose one of: {', '.join(MODEL_TYPES)}")
    lines = (sentence for text in texts for line in text.splitlines() if line.strip() for sentence in _cut(line))
    try:
        _train(lines, model_path, vocab_size, model_type)
    except RuntimeError as error:
        if needed := re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(error)):
            raise DataFileError(f"config.dataset.vocab_size={vocab_size} is smaller than the {needed.group(1)} "
                                f"pieces this corpus's characters and the special pieces need; set "
                                f"--config.dataset.vocab_size={needed.group(1)} or more") from None
        raise


def _cut(line: str, limit: int = MAX_SENTENCE_BYTES):
    """`line` in sentences of at most `limit` UTF-8 bytes: whole words, a word longer than that in parts."""
    if len(line.encode()) <= limit:
        yield line
        return
    sentence, size = [], 0
    for word in line.split(" "):
        length = len(word.encode()) + 1
        if sentence and size + length > limit:
            yield " ".join(sentence)
            sentence, size = [], 0
        if length > limit:  # a UTF-8 character is at most 4 bytes
            yield from (word[i:i + limit // 4] for i in range(0, len(word), limit // 4))
            continue
        sentence.append(word)
        size += length
    if sentence:
        yield " ".join(sentence)


def _train(lines, model_path: str, vocab_size: int, model_type: str) -> None:
    # Written whole, then renamed over the path: processes that train in parallel never read half a model.
    model_file = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=lines,
        model_writer=model_file,
        model_type=model_type,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        pad_id=PAD, unk_id=UNK, eos_id=EOS, bos_id=-1,
        user_defined_symbols=[MASK_PIECE],  # placed right after the control symbols, at id MASK
        input_sentence_size=0,
        max_sentence_length=MAX_SENTENCE_BYTES,
        shuffle_input_sentence=False,
        num_threads=1,
        minloglevel=1,  # warnings and errors only
    )
    os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
    atomic.write_bytes(model_path, model_file.getvalue())


class Tokenizer:
    PAD, UNK, EOS, MASK, NUM_SPECIAL = PAD, UNK, EOS, MASK, NUM_SPECIAL

    def __init__(self, processor: spm.SentencePieceProcessor):
        self._processor = processor

    @classmethod
    def load(cls, model_path: str) -> "Tokenizer":
        processor = spm.SentencePieceProcessor(model_file=model_path)
        _check_special_ids(processor, model_path)
        return cls(processor)

    def encode(self, text: str) -> list[int]:
        return self._processor.encode(text, out_type=int)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._processor.encode(list(texts), out_type=int)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of the ids, PAD skipped (EOS, a control symbol, decodes to nothing)."""
        return self._processor.decode([int(i) for i in ids if int(i) != PAD])

    @property
    def vocab_size(self) -> int:
        return self._processor.get_piece_size()

    def piece(self, id: int) -> str:
        return self._processor.id_to_piece(int(id))


def _check_special_ids(processor: spm.SentencePieceProcessor, model_path: str):
    """Models and masking agree on the special ids only if the model was trained by train_sentencepiece."""
    found = (processor.pad_id(), processor.unk_id(), processor.eos_id(), processor.piece_to_id(MASK_PIECE))
    if found != (PAD, UNK, EOS, MASK):
        raise DataFileError(f"{model_path}: special ids (pad, unk, eos, {MASK_PIECE}) are {found}, expected "
                            f"{(PAD, UNK, EOS, MASK)}; delete the file to train it again (or train it with "
                            f"data.tokenizer.train_sentencepiece)")


def load_or_train(model_path: str, texts_fn: Callable[[], list[str]], vocab_size: int,
                  model_type: str = "unigram") -> Tokenizer:
    """The model at model_path, trained first from texts_fn() if the file does not exist yet, or again (with
    a warning) if it is no SentencePiece model: damaged files hold no other copy of anything. One process
    trains it at a time; another waits, then reads it."""
    with locks.building(model_path):
        if os.path.exists(model_path):
            try:
                return Tokenizer.load(model_path)
            except RuntimeError as error:  # SentencePiece's "could not parse ModelProto"
                print(f"warning: {model_path}: not a SentencePiece model ({atomic.first_line(error)}); training it "
                      f"again from the training text", flush=True)
        train_sentencepiece(texts_fn(), model_path, vocab_size, model_type)
        return Tokenizer.load(model_path)
