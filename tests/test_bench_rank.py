"""benchmarks/rank.py at tiny sizes, through python -m scripts.bench_rank's command line: every length has its
row, the old path runs in full only up to --old_max_length, and the markdown table is written. No speed is
asserted."""
import json

from scripts import bench_rank


def test_rows_and_table(tmp_path):
    bench_rank.main(["--lengths=8,16", "--old_max_length=8", "--heads=2", "--head_dim=4", "--repeats=1",
                     f"--out={tmp_path}"])
    result = json.loads((tmp_path / "rank.json").read_text())
    rows = {row["length"]: row for row in result["rows"]}
    assert sorted(rows) == [8, 16]
    for row in rows.values():
        assert row["matrices"] == 2 * 1 * 2  # layers x batch x heads
        assert row["new_s"] > 0 and row["old_extrapolated_s"] > 0 and row["speedup"] > 0
    assert rows[8]["old_s"] > 0 and rows[16]["old_s"] is None
    text = (tmp_path / "rank.md").read_text()
    assert "| 8 | 4 |" in text and "| 16 | 4 | - |" in text
