"""scripts/summarize_runs.py on a hand-written eval.json."""
import json

from scripts import summarize_runs


def _row(role, layer, head, numerical, bound):
    return {"role": role, "layer": layer, "head": head, "seq_len": 6, "numerical_rank": numerical,
            "effective_rank": numerical / 2, "stable_rank": 1.0, "rank_bound": bound}


def test_tables_average_ranks_over_layers_and_heads(tmp_path):
    result = {
        "step": 10, "task": "translation", "split": "test", "num_examples": 3,
        "attention": {"encoder_self": "linear", "decoder_self": "linear", "cross": "softmax"},
        "metrics": {"exact_match": 0.5, "loss": 1.25},
        "rank": [_row("encoder_self", 0, 0, 2.0, 4), _row("encoder_self", 1, 0, 4.0, 4),
                 _row("decoder_self", 0, 0, 6.0, None), _row("cross", 0, 0, 5.0, None)],
    }
    (tmp_path / "eval.json").write_text(json.dumps(result))
    results = {str(tmp_path): summarize_runs.load(str(tmp_path))}
    assert summarize_runs.metrics_table(results).splitlines()[2] == f"| {tmp_path} | linear/softmax | 0.5000 | 1.2500 |"
    rows = summarize_runs.rank_table(results).splitlines()[2:]
    assert rows == [f"| {tmp_path} | encoder_self | linear | 6 | 3.00 | 1.50 | 1.00 | 4 |",
                    f"| {tmp_path} | decoder_self | linear | 6 | 6.00 | 3.00 | 1.00 | - |",
                    f"| {tmp_path} | cross | softmax | 6 | 5.00 | 2.50 | 1.00 | - |"]
