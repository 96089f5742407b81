"""Data files a user brings: parallel (source, target) pairs in SCAN's own format or as tab-separated
lines, and plain text for MLM."""

import os


class DataFileError(ValueError):
    """A data file that is missing, empty, not UTF-8 or has a line that does not parse."""


class DatasetNotPreparedError(DataFileError):
    """A TFDS dataset that is not built under the data directory (or no TFDS dataset at all)."""


def _numbered_lines(path: str) -> list[tuple[int, str]]:
    """(line number, line) of the non-blank lines of a UTF-8 text file, stripped."""
    if os.path.isdir(path):
        raise DataFileError(f"{path}: a directory, not a data file")
    if not os.path.isfile(path):
        raise DataFileError(f"{path}: file not found")
    with open(path, "rb") as f:
        raw_lines = f.read().splitlines()
    lines = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as error:
            raise DataFileError(f"{path}:{number}: not UTF-8 ({error.reason} at byte {error.start}); "
                                f"convert the file to UTF-8") from None
        if line:
            lines.append((number, line))
    return lines


def read_documents(path: str) -> list[str]:
    """The non-blank lines of a UTF-8 text file, one document each."""
    documents = [line for _, line in _numbered_lines(path)]
    if not documents:
        raise DataFileError(f"{path}: no text (the file is empty)")
    return documents


def read_parallel_file(path: str, max_source_len: int, max_target_len: int) -> list[tuple[str, str]]:
    """Pairs of a file whose lines are `IN: <source> OUT: <target>` or `<source>\\t<target>`, each side
    at most max_*_len words (a longer line would pad every batch to its length).

    The first non-blank line decides the format for the whole file; blank lines are skipped.
    """
    numbered_lines = _numbered_lines(path)
    if not numbered_lines:
        raise DataFileError(f"{path}: no pairs (the file is empty)")
    parse = _parse_scan_line if numbered_lines[0][1].startswith("IN:") else _parse_tsv_line
    _check_no_header(path, *numbered_lines[0])
    pairs = []
    for number, line in numbered_lines:
        try:
            pairs.append(_within(parse(line), max_source_len, max_target_len))
        except ValueError as error:
            raise DataFileError(f"{path}:{number}: {error}") from None
    return pairs


# Column names a spreadsheet or pandas writes as a first line: such a line would train as a pair.
HEADER_WORDS = frozenset({"source", "target", "src", "tgt", "input", "output", "inputs", "outputs", "sources",
                          "targets", "in", "out", "command", "commands", "action", "actions"})


def _check_no_header(path: str, number: int, line: str) -> None:
    fields = [field.strip().lower() for field in line.split("\t")]
    if len(fields) == 2 and all(field in HEADER_WORDS for field in fields):
        raise DataFileError(f"{path}:{number}: a header line ({line!r}), not a pair; delete it: the file holds "
                            f"pairs only")


def _within(pair: tuple[str, str], max_source_len: int, max_target_len: int) -> tuple[str, str]:
    for side, text, limit in (("source", pair[0], max_source_len), ("target", pair[1], max_target_len)):
        if (words := len(text.split())) > limit:
            raise ValueError(f"the {side} has {words:,} words, over config.dataset.max_{side}_len={limit}; "
                             f"shorten or drop the line, or raise the limit")
    return pair


def _parse_scan_line(line: str) -> tuple[str, str]:
    line = line.strip()
    if not line.startswith("IN:"):
        raise ValueError("expected a line 'IN: <source> OUT: <target>'")
    source, separator, target = line[len("IN:") :].partition(" OUT:")
    if not separator:
        raise ValueError("missing ' OUT:'")
    return _nonempty(source.strip(), target.strip())


def _parse_tsv_line(line: str) -> tuple[str, str]:
    fields = line.split("\t")
    if len(fields) != 2:
        raise ValueError(f"expected exactly one tab between source and target, found {len(fields) - 1}")
    return _nonempty(fields[0].strip(), fields[1].strip())


def _nonempty(source: str, target: str) -> tuple[str, str]:
    if not source:
        raise ValueError("empty source")
    if not target:
        raise ValueError("empty target")
    return source, target
