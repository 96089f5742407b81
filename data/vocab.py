"""Word-level vocabulary with reserved ids for padding, sequence boundaries and unknown words."""

import json
from collections.abc import Iterable


class Vocabulary:
    PAD, BOS, EOS, UNK = 0, 1, 2, 3
    SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # indexed by the ids above

    def __init__(self, tokens: list[str]):
        if tuple(tokens[: len(self.SPECIAL_TOKENS)]) != self.SPECIAL_TOKENS:
            raise ValueError(f"a vocabulary must start with {list(self.SPECIAL_TOKENS)}, got {tokens[:4]}")
        self.tokens = list(tokens)
        self._ids = {token: i for i, token in enumerate(self.tokens)}

    @classmethod
    def build(cls, sentences: Iterable[str]) -> "Vocabulary":
        """The special tokens, then every word of the sentences in sorted order."""
        words = {word for sentence in sentences for word in sentence.split()}
        return cls([*cls.SPECIAL_TOKENS, *sorted(words - set(cls.SPECIAL_TOKENS))])

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(word, self.UNK) for word in text.split()]

    def decode(self, ids: Iterable[int]) -> str:
        """Words up to the first EOS, without PAD and BOS."""
        words = []
        for i in ids:
            i = int(i)  # also accepts numpy and JAX integer scalars
            if i == self.EOS:
                break
            if i not in (self.PAD, self.BOS):
                words.append(self.tokens[i])
        return " ".join(words)

    def __len__(self) -> int:
        return len(self.tokens)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.tokens == other.tokens

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.tokens, f, indent=0)

    @classmethod
    def load(cls, path: str) -> "Vocabulary":
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))
