"""The results tables of README.md and docs/*.md held to the results they quote: every cell of a quoted table
equals its report's, recomputed from the study's results.json, either by the code that wrote the report's
table (`regenerated`) or, where the doc derives the table (percentages, runs side by side), by a function
here; a report with no results.json (the pilots, the benchmarks) is held through its report.md. QUOTES maps
each such table to its source; a table that quotes nothing is named in NOT_QUOTED, so that a new results
table cannot go unchecked."""
import dataclasses
import functools
import json
import os
import re
import tempfile
from collections.abc import Callable

import numpy as np
import pytest

import tasks
from analysis import recall_report, report, stats
from demos import attention_scale, nadaraya_watson
from studies import runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ("README.md", "docs/results.md", "docs/usage.md", "docs/attention.md", "docs/accelerators.md",
        "docs/benchmarks.md", "docs/design.md")


@dataclasses.dataclass
class Table:
    line: int  # 1-based, the header's
    header: tuple[str, ...]
    rows: list[tuple[str, ...]]


def _cells(line: str) -> tuple[str, ...]:
    return tuple(cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|"))


def parse_tables(text: str) -> list[Table]:
    """Every markdown table of `text`, indented ones (in a list item) too: its header and body rows (cells
    stripped, bold marks dropped)."""
    tables, block = [], []
    for number, line in enumerate(text.splitlines() + [""], start=1):
        if line.lstrip().startswith("|"):
            block.append((number, line))
            continue
        if len(block) >= 2:
            tables.append(Table(block[0][0], _cells(block[0][1]), [_cells(row) for _, row in block[2:]]))
        block = []
    return tables


# --- sources: a report's tables written again from its results.json, or cells computed from it --------------


def _read(path: str) -> str:
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def _results(report_dir: str) -> dict[str, list[dict]]:
    return json.loads(_read(os.path.join(report_dir, report.RESULTS_JSON)))


# The reports a demo writes (scripts/nadaraya_watson.py, scripts/attention_scale.py): their tables' functions.
DEMO_TABLES = {"reports/nadaraya_watson": nadaraya_watson.mse_table, "reports/attention_scale": attention_scale.table}


@functools.cache
def regenerated(report_dir: str) -> str:
    """The tables of the report in `report_dir` written again from its results.json by the code that wrote
    them: a demo's table (DEMO_TABLES), or a study's whole report (report.write_report, its task's sections,
    the picks its runs.json records) in a temporary directory, plots and all; nothing trains."""
    results = _results(report_dir)
    if report_dir in DEMO_TABLES:
        return DEMO_TABLES[report_dir](results)
    runs_path = os.path.join(report_dir, runner.RUNS_JSON)
    records = json.loads(_read(runs_path)) if os.path.exists(os.path.join(ROOT, runs_path)) else {}
    picks = {name: record["pick"] for name, record in records.items() if record.get("pick")}
    task = tasks.get(next(iter(results.values()))[0]["task"])
    with tempfile.TemporaryDirectory() as out_dir:
        path = report.write_report(task, "", "", results, {}, out_dir, runner.head_dim(results), picks)
        with open(path) as f:
            return f.read()


def source_text(source: str) -> str:
    """A report directory's tables, from its results.json (`regenerated`); a report.md file's own text."""
    return regenerated(source) if os.path.isdir(os.path.join(ROOT, source)) else _read(source)


Row = dict[str, str]  # a doc table's row: header -> cell
Expected = Callable[[str, Row], Row]  # (source, the doc's row) -> the cells it must hold


def copied(key_columns: int = 1, columns: dict | None = None, rows: dict | None = None) -> Expected:
    """The row of the source's table (source_text's table whose header holds the doc's columns) with the
    same first `key_columns` cells (renamed by `rows`), its columns named as the doc's (renamed by `columns`)."""
    columns, rows = columns or {}, rows or {}

    def expected(source: str, row: Row) -> Row:
        names = [columns.get(name, name) for name in row]
        (table,) = [table for table in parse_tables(source_text(source)) if set(names) <= set(table.header)]
        key = tuple(row.values())[:key_columns]
        key = rows.get(key[0], key[0]) if key_columns == 1 else key
        matches = [dict(zip(table.header, cells)) for cells in table.rows
                   if (cells[0] if key_columns == 1 else cells[:key_columns]) == key]
        if not matches:
            return {name: "(no such row in the report)" for name in row}
        cells = {name: matches[0][columns.get(name, name)] for name in row}
        return {**cells, **dict(zip(row, tuple(row.values())[:key_columns]))}  # renamed labels stand
    return expected


def _mean_std(values: list[float], scale: float, digits: int) -> str:
    mean, std = stats.mean_std(values)
    return f"{scale * mean:.{digits}f} ± " + ("-" if std is None else f"{scale * std:.{digits}f}")


def _accuracy(evals: list[dict], metric: str, scale: float = 100.0, digits: int = 2) -> str:
    return _mean_std([result["metrics"][metric] for result in evals], scale, digits)


# The first word of a doc's label for a kind -> the kind, where the docs name it as its paper does.
_LABEL_KINDS = {"elu": "linear", "deltanet": "delta", "gated": "gated_delta", "gla": "gated_linear"}


def _recall_run(results: dict, row: Row, pairs: int = 16) -> str | None:
    """The recall run of a doc row at N = `pairs`: its kind (the first word of the kind or attention cell,
    _LABEL_KINDS), d' (its own column, "d' = 16" in the label, else the head's 64) and, where the label says
    "window 16", the window; None if not run."""
    label = row.get("kind", row.get("attention", ""))
    first_word = label.split()[0].lower().rstrip(",")
    kind = _LABEL_KINDS.get(first_word, first_word)
    width = row.get("d'") or (re.search(r"d' = (\d+)", label) or [None, "64"])[1]
    window = re.search(r"window (\d+)", label)
    runs = [name for name, evals in results.items()
            if re.fullmatch(rf"{kind}(_d\d+)?(_[mw]\d+)?(_per_feature)?_N{pairs}", name)
            and (window is None or f"_w{window[1]}_" in name)
            and str(recall_report._state(evals)["key_dim"]) == width]
    assert len(runs) <= 1, f"{label}: several runs {runs}"
    return runs[0] if runs else None


def _layer_means(evals: list[dict]) -> dict[int, dict[str, float]]:
    """Layer -> each rank metric's mean over the rows of every seed in it (recall has one role)."""
    layers = sorted({row["layer"] for result in evals for row in result["rank"]})
    return {layer: {field: float(np.mean([row[field] for result in evals for row in result["rank"]
                                          if row["layer"] == layer]))
                    for field in ("numerical_rank", "effective_rank")} for layer in layers}


def _recall_cells(evals: list[dict]) -> Row:
    state = recall_report._state(evals)
    ranks = _layer_means(evals)
    return {"feature dim m": "-" if state["feature_dim"] is None else str(state["feature_dim"]),
            "m": "-" if state["feature_dim"] is None else str(state["feature_dim"]),
            "state / head": f"{state['per_head']:,}", "state per head": f"{state['per_head']:,}",
            "query accuracy": _accuracy(evals, "query_accuracy"),
            **{f"effective rank, layer {layer}": f"{metrics['effective_rank']:.2f}"
               for layer, metrics in ranks.items()}}


def recall_headline(source: str, row: Row) -> Row:
    """The main result's table: README's labels ("elu + 1, d' = 4"), accuracies as fractions."""
    results = _results(source)
    evals = results[_recall_run(results, row)]
    return {**_recall_cells(evals), "query accuracy (test, mean ± std)": _accuracy(evals, "query_accuracy", 1.0, 4)}


def recall_runs(source: str, row: Row) -> Row:
    """A row per run at N = 16, or a row per series with a column per N ("N = 4"), or the bidirectional
    table's last columns ("numerical / effective rank at N = 16, layer 0"): every layer, none chosen per run."""
    results = _results(source)
    cells = {}
    for name in row:
        pairs = re.fullmatch(r"N = (\d+)", name)
        if pairs:
            run = _recall_run(results, row, int(pairs.group(1)))
            cells[name] = _accuracy(results[run], "query_accuracy") if run else ""
    run = _recall_run(results, row)
    if run:
        cells = {**_recall_cells(results[run]), **cells}
        for layer, metrics in _layer_means(results[run]).items():
            cells[f"numerical / effective rank at N = 16, layer {layer}"] = (
                f"{metrics['numerical_rank']:.2f} / {metrics['effective_rank']:.2f}")
    return cells


def _role_mean(evals: list[dict], role: str, field: str) -> float:
    return float(np.mean([row[field] for result in evals for row in result["rank"] if row["role"] == role]))


def translation_forms(source: str, row: Row) -> Row:
    """A model and form per row ("rnn_dynamic (Luong multiplicative)"), its runs on simple and length."""
    results = _results(source)
    run = row["run"].split()[0]
    length = results[f"{run}_length"]
    return {"run": row["run"],
            "simple": _accuracy(results[f"{run}_simple"], "exact_match") + "%",
            "length": _accuracy(length, "exact_match") + "%",
            "length: token accuracy": f"{100 * np.mean([r['metrics']['token_accuracy'] for r in length]):.1f}%",
            "length: effective rank of the cross-attention": f"{_role_mean(length, 'cross', 'effective_rank'):.2f}"}


def listops_runs(source: str, row: Row) -> Row:
    """The report's columns and, from results.json, each seed's accuracy in percent and the pooling head."""
    evals = _results(source)[row["run"]]
    return {**copied()(source, {k: v for k, v in row.items() if k not in ("pooling", "per seed")}),
            "pooling": evals[0]["pooling"],
            "per seed": ", ".join(f"{100 * result['metrics']['accuracy']:.2f}" for result in evals)}


def kernel_errors(source: str, row: Row) -> Row:
    """A kernel ("performer, orthogonal", "taylor p = 2") at a feature dim: its mean relative error at
    each norm."""
    family, _, order = row["kernel"].replace(", ", "_").partition(" ")
    points = [point for point in json.loads(_read(source))["kernels"]
              if point["kernel"] == family and point["feature_dim"] == int(row["feature dim"].replace(",", ""))
              and (not order or point["order"] == int(order.split()[-1]))]
    return {"feature dim": row["feature dim"] if points else "(no such kernel)",
            **{f"norm {point['norm']:g}": f"{point['relative_error']:.2e}" for point in points}}


def prefetch_ratio(source: str, row: Row) -> Row:
    """A config's host and prefetch rows of the report side by side, and their ratio."""
    (table,) = parse_tables(_read(source))
    ms = {cells[1]: cells[2] for cells in table.rows if cells[0] == row["config"]}
    return {"host ms/step": ms["host"], "prefetch ms/step": ms["prefetch"],
            "prefetch / host": f"{float(ms['prefetch']) / float(ms['host']):.2f}"}


@dataclasses.dataclass(frozen=True)
class Quote:
    doc: str
    header: tuple[str, ...]  # the doc table's header ...
    after: str  # ... the first such table after this text in the doc
    source: str  # the report directory whose results.json it quotes, or the report.md of a report without one
    expected: Expected
    key_columns: int = 1  # the cells that name a row, in messages


_RUN_ACCURACY = ("run", "kind", "feature dim", "seeds", "exact_match (mean ± std)", "token_accuracy", "bleu", "loss")
_KIND_STATE = ("kind", "d'", "feature dim m", "state / head")
_MLM_ACCURACY = ("run", "kind", "feature dim", "seeds", "masked_accuracy (mean ± std)", "loss", "perplexity")
_MLM_RECALL_SLICE = ("run", "kind", "feature dim", "seeds", "recall share", "recall slice", "rest",
                     "vs softmax, all (95% CI)", "vs softmax, recall slice (95% CI)", "seeds above every baseline")
_MLM_PICK = ("run", "learning_rate=0.001", "learning_rate=0.003", "learning_rate=0.01", "selected")
_PREDICTORS = ("predictor", "all positions", "recall slice", "rest")
_BY_LAYER = ("run", "kind", "layer", "numerical rank", "effective rank", "stable rank")
QUOTES = [
    Quote("README.md", ("attention", "feature dim m", "state per head", "query accuracy (test, mean ± std)"),
          "## The main result", "reports/recall/state", recall_headline),
    Quote("docs/results.md", _RUN_ACCURACY, "reports/translation/default/report.md", "reports/translation/default",
          copied()),
    Quote("docs/results.md", ("run", "role", "kind", "seq len", "numerical rank", "effective rank", "stable rank",
                        "rank bound"), "reports/translation/default/report.md",
          "reports/translation/default", copied(2), 2),
    Quote("docs/results.md", _RUN_ACCURACY, "reports/translation/kinds/report.md", "reports/translation/kinds",
          copied()),
    Quote("docs/results.md", _RUN_ACCURACY, "reports/translation/splits/report.md", "reports/translation/splits",
          copied()),
    Quote("docs/results.md", ("run", "simple", "length", "length: token accuracy",
                        "length: effective rank of the cross-attention"),
          "reports/translation/forms/report.md", "reports/translation/forms", translation_forms),
    Quote("docs/results.md", _MLM_ACCURACY,
          "reports/mlm/report.md", "reports/mlm", copied()),
    Quote("docs/results.md", ("run", "kind", "seq len", "numerical rank", "max numerical rank", "effective rank",
                        "stable rank", "rank bound", "matrices over bound", "mean > head dim (32)"),
          "reports/mlm/report.md", "reports/mlm", copied()),
    Quote("docs/results.md", ("pilot", "variant", "validation @300", "@600", "@900", "@1200", "test masked accuracy",
                              "recall slice", "rest"),
          "reports/mlm/pilots/report.md", "reports/mlm/pilots/report.md", copied()),
    *(Quote("docs/results.md", header, "reports/mlm/standard/report.md", "reports/mlm/standard", copied(key))
      for header, key in (((*_MLM_ACCURACY, "selected"), 1), (_MLM_RECALL_SLICE, 1), (_MLM_PICK, 1),
                          (_PREDICTORS, 1), (_BY_LAYER, 3))),
    Quote("docs/results.md", _PREDICTORS, "reports/mlm/report.md", "reports/mlm", copied()),
    Quote("docs/results.md", (*_KIND_STATE, "N = 4", "N = 8", "N = 16"), "## Associative recall", "reports/recall",
          recall_runs),
    Quote("docs/results.md", (*_KIND_STATE, "query accuracy", "effective rank, layer 0", "effective rank, layer 1"),
          "## Associative recall",
          "reports/recall", recall_runs, 2),
    Quote("docs/results.md", ("kind", "d'", "m", "N = 4", "N = 8", "N = 16", "numerical / effective rank at N = 16, layer 0",
                        "numerical / effective rank at N = 16, layer 1"),
          "reports/recall/bidirectional/report.md", "reports/recall/bidirectional", recall_runs, 2),
    Quote("docs/results.md", ("kind", "m", "state / head", "query accuracy", "effective rank, layer 0",
                        "effective rank, layer 1"),
          "reports/recall/kinds/report.md", "reports/recall/kinds", recall_runs),
    Quote("docs/results.md", ("run", "N", "seeds", "query accuracy (mean ± std)", "per seed", "selected"),
          "reports/recall/anchors/report.md", "reports/recall/anchors", copied()),
    Quote("docs/results.md", ("run", *(f"learning_rate={rate}" for rate in ("0.0001", "0.000464", "0.00215", "0.01")),
                              "selected"),
          "reports/recall/anchors/report.md", "reports/recall/anchors", copied()),
    Quote("docs/results.md", ("run", "kind", "pooling", "seeds", "accuracy (mean ± std)", "per seed", "loss"),
          "reports/listops/report.md", "reports/listops", listops_runs),
    Quote("docs/results.md", ("estimator", "width w", "test MSE"), "reports/nadaraya_watson/report.md",
          "reports/nadaraya_watson",
          copied(rows={"fixed kernel": "fixed width", "learned kernel": "learned width"})),
    Quote("docs/results.md", ("d", "row entropy, q.k", "row entropy, q.k / sqrt(d)", "Jacobian median, q.k",
                        "Jacobian median, q.k / sqrt(d)"), "reports/attention_scale/report.md",
          "reports/attention_scale",
          copied(rows={"1,024": "1024"}, columns={"row entropy, q.k": "entropy, q.k",
                                                  "row entropy, q.k / sqrt(d)": "entropy, scaled",
                                                  "Jacobian median, q.k / sqrt(d)": "Jacobian median, scaled"})),
    Quote("docs/results.md", ("kernel", "feature dim", "norm 1", "norm 2", "norm 4", "norm 8"),
          "reports/kernel_approx/kernel_approx.json", "reports/kernel_approx/kernel_approx.json", kernel_errors, 2),
    Quote("docs/benchmarks.md", ("config", "ms/step", "x first", "tokens/s", "GFLOP/step", "GFLOP/s", "of matmul"),
          "reports/bench/train.{json,md}", "reports/bench/train.md", copied()),
    Quote("docs/benchmarks.md", ("L", "softmax ms/token", "linear ms/token", "performer ms/token",
                                 "softmax tokens/s", "linear tokens/s", "performer tokens/s"),
          "reports/bench/decode.{json,md,png}", "reports/bench/decode.md", copied()),
    Quote("docs/benchmarks.md", ("L", "matrices", "old, full (s)", "old, extrapolated (s)", "new (s)", "old/new"),
          "reports/bench/rank.{json,md}", "reports/bench/rank.md", copied()),
    Quote("docs/benchmarks.md", ("config", "batches", "runs in the program", "ms/step", "trainings/hour", "x one run",
                                 "GFLOP/step", "of matmul"), "reports/bench/packed.{json,md}", "reports/bench/packed.md",
          copied(3), 3),
    Quote("docs/benchmarks.md", ("sitting", "--pack", "trainings", "processes", "wall time", "trainings/hour",
                                 "x unpacked", "largest test-metric gap to sitting 0"),
          "reports/bench/packed_study.{json,md}", "reports/bench/packed_study.md", copied()),
    Quote("docs/benchmarks.md", ("L", "batch", "basis", "fwd+bwd ms", "x softmax", "excess error, mean",
                                 "excess error, max"), "reports/bench/rank_basis.{json,md}",
          "reports/bench/rank_basis.md", copied(3), 3),
    Quote("docs/benchmarks.md", ("config", "host ms/step", "prefetch ms/step", "prefetch / host"),
          "reports/bench/input_pipeline/train.{json,md}", "reports/bench/input_pipeline/train.md",
          lambda source, row: prefetch_ratio(source, row)),
]

# Tables that quote no report: settings, layouts, data sizes, and benchmark tables rearranged from their
# JSON per mode (docs/benchmarks.md, named in the text), which their reports list in another shape.
NOT_QUOTED = {
    "README.md": {"kind", "task"},
    "docs/results.md": set(),
    "docs/usage.md": {"command", "file", "field", "split"},
    "docs/attention.md": {"kind", "option", "head"},
    "docs/accelerators.md": {"field"},
    "docs/benchmarks.md": {"mode", "L"},
    "docs/design.md": {"folder", "task", "argument", "file", "piece"},
}


LABELS = ("kind", "attention", "run", "d'", "kernel", "config")  # cells that name a row of a derived table, as the doc words it


def find_table(quote: Quote, text: str | None = None) -> Table:
    text = _read(quote.doc) if text is None else text
    start = text.index(quote.after)
    after_line = text[:start].count("\n") + 1
    return next(table for table in parse_tables(text) if table.header == quote.header and table.line > after_line)


def mismatches(quote: Quote, text: str | None = None) -> list[str]:
    """'line: row, column: doc cell != report cell' for every cell of the quoted table that differs."""
    table = find_table(quote, text)
    out = []
    for number, cells in enumerate(table.rows, start=table.line + 2):
        row = dict(zip(table.header, cells))
        expected = quote.expected(quote.source, row)
        key = ", ".join(cells[:quote.key_columns])
        out += [f"{quote.doc}:{number} {key}, {name}: {value!r} != {expected.get(name, '(not checked)')!r} "
                f"({quote.source})" for name, value in row.items()
                if name not in LABELS and value != expected.get(name, "(not checked)")]
    return out


@pytest.mark.parametrize("quote", QUOTES, ids=lambda quote: f"{quote.doc}:{quote.source}:{quote.header[1]}")
def test_quoted_table_equals_its_report(quote):
    assert mismatches(quote) == []


def test_a_table_in_a_list_item_is_parsed():
    (table,) = parse_tables("- a reading:\n\n  | run | accuracy |\n  |---|---:|\n  | softmax | 0.99 |\n")
    assert (table.header, table.rows) == (("run", "accuracy"), [("softmax", "0.99")])


def test_every_results_table_is_quoted_or_named():
    quoted = {(quote.doc, find_table(quote).line) for quote in QUOTES}
    unnamed = [f"{doc}:{table.line} {table.header}" for doc in DOCS for table in parse_tables(_read(doc))
               if (doc, table.line) not in quoted and table.header[0] not in NOT_QUOTED[doc]]
    assert unnamed == []


def test_a_changed_cell_fails():
    """The checker itself, on a copy of docs/results.md with one cell of a derived table and one of a copied
    table changed."""
    text = _read("docs/results.md")
    quotes = {quote.source: quote for quote in QUOTES}
    for quote, old, new in ((quotes["reports/recall/kinds"], "| 0.76 ± 0.02 | 12.36 |", "| 0.76 ± 0.02 | 12.82 |"),
                            (quotes["reports/translation/splits"], "| 0.0030 ± 0.0011 |",
                             "| 0.0031 ± 0.0011 |")):
        assert mismatches(quote, text) == []
        changed = text.replace(old, new, 1)
        assert changed != text
        (message,) = mismatches(quote, changed)
        assert f"'{new.split(' | ')[-1].strip('| ')}' != " in message
