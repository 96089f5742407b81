"""Data files a user brings: parallel (source, target) pairs in SCAN's own format or as tab-separated
lines, and plain text for MLM."""

import os


class DataFileError(ValueError):
    """A data file that is missing, empty, not UTF-8 or has a line that does not parse."""


def read_documents(path: str) -> list[str]:
    """The non-blank lines of a UTF-8 text file, one document each."""
    if not os.path.isfile(path):
        raise DataFileError(f"{path}: file not found")
    with open(path, "rb") as f:
        raw_lines = f.read().splitlines()
    documents = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as error:
            raise DataFileError(f"{path}:{number}: not UTF-8 ({error.reason})") from None
        if line:
            documents.append(line)
    if not documents:
        raise DataFileError(f"{path}: no text (the file is empty)")
    return documents


def read_parallel_file(path: str) -> list[tuple[str, str]]:
    """Pairs of a file whose lines are `IN: <source> OUT: <target>` or `<source>\\t<target>`.

    The first non-blank line decides the format for the whole file; blank lines are skipped.
    """
    if not os.path.isfile(path):
        raise DataFileError(f"{path}: file not found")
    with open(path, encoding="utf-8") as f:
        numbered_lines = [(n, line.rstrip("\r\n")) for n, line in enumerate(f, start=1) if line.strip()]
    if not numbered_lines:
        raise DataFileError(f"{path}: no pairs (the file is empty)")
    parse = _parse_scan_line if numbered_lines[0][1].lstrip().startswith("IN:") else _parse_tsv_line
    pairs = []
    for number, line in numbered_lines:
        try:
            pairs.append(parse(line))
        except ValueError as error:
            raise DataFileError(f"{path}:{number}: {error}") from None
    return pairs


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
