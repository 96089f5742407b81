"""A trained softmax model's attention cut to rank m, or its rows flattened by a temperature, at evaluation only
(studies/interventions.py): each seed of a study's softmax run evaluated under each intervention, reported as a
study's runs are (report.md, results.json, plots). By default the rank-or-shape study's softmax at L = 128.

  python -m scripts.attention_interventions [--runs=runs/compare/mlm/rank_or_shape/softmax]
      [--interventions=none,rank=64,rank=32,rank=16,rank=8,temperature=2,temperature=4,temperature=8]
      [--evals=runs/interventions/mlm_rank_or_shape] [--out=runs/reports/mlm/rank_or_shape/interventions]
"""
import glob
import os
import sys

from absl import flags

from configs import grids
from scripts import command_line
from studies import interventions

# Written before any evaluation ran.
NOTES = """Predictions, written before any evaluation: the three seeds of the rank-or-shape study's softmax (L = 128,
2,000 steps) evaluated with no retraining under two interventions: its weights cut to rank m (A -> A V_m V_m^T, the
softmax_rank kind over the parameters softmax trained) and its logits divided by a temperature T (its rows
flattened, its rank left free). If what softmax learned relies on rank above 32, the rank-32 cut costs a large part
of linear attention's 13.7-point gap while its rows stay near softmax's entropy; if it relies on sharp rows, the
temperature that brings its rows to linear's entropy (0.95 of the maximum) costs more than the rank-32 cut. Either
reading is of reliance: a model trained under the constraint adapts to it (softmax_rank32 trained at rank 32 lost
5.2 points), so these losses bound nothing about what such a model reaches.
The contrasts under "Predictions against results" were chosen after the evaluations had run (the temperature that
brings the rows to linear's entropy, and the pair of interventions of equal row entropy, read off the rank
table); the predictions above were not."""

CONTRASTS = (
    grids.Contrast("cut to rank 32", {"rank32": 1.0, "none": -1.0}),
    grids.Contrast("flattened by T = 4 (rows at linear attention's entropy, rank left free)",
                   {"temperature4": 1.0, "none": -1.0}),
    grids.Contrast("flattened by T = 4 minus cut to rank 32 (negative: flat rows cost more)",
                   {"temperature4": 1.0, "rank32": -1.0}),
    grids.Contrast("at equal row entropy (0.80 of the maximum): cut to rank 8 minus flattened by T = 2 (negative: "
                   "the rank cut costs more)", {"rank8": 1.0, "temperature2": -1.0}),
)

FLAGS = flags.FlagValues()
flags.DEFINE_string("runs", "runs/compare/mlm/rank_or_shape/softmax",
                    "a study's run folder: its seed<k> workdirs (softmax in every role) are evaluated", flag_values=FLAGS)
flags.DEFINE_list("interventions", ["none", "rank=64", "rank=32", "rank=16", "rank=8", "temperature=2",
                                    "temperature=4", "temperature=8"],
                  "none, rank=<m> (weights cut to rank m) or temperature=<T> (logits divided by T)", flag_values=FLAGS)
flags.DEFINE_string("evals", "runs/interventions/mlm_rank_or_shape",
                    "folder of each evaluation (eval.json, spectra.json); kept, so a rerun evaluates what is missing",
                    flag_values=FLAGS)
flags.DEFINE_string("out", "runs/reports/mlm/rank_or_shape/interventions", "folder of report.md, results.json and "
                    "the plots (reports/mlm/rank_or_shape/interventions: the committed one)", flag_values=FLAGS)


def main(argv=None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    args = command_line.parse(FLAGS, argv, __doc__)
    workdirs = sorted(glob.glob(os.path.join(args.runs, "seed[0-9]*")), key=lambda path: int(path.rsplit("seed", 1)[1]))
    if not workdirs:
        command_line.fail(f"--runs={args.runs}: no seed<k> workdirs in it; train the study first")
    try:
        chosen = [interventions.parse(spec) for spec in args.interventions]
    except ValueError as error:
        command_line.fail(f"--interventions: {error}")
    command = ("python -m scripts.attention_interventions " + " ".join(argv)).strip()
    with command_line.one_line_errors():
        path = interventions.run(workdirs, chosen, args.evals, args.out, command, NOTES, CONTRASTS)
    print(f"report: {path}", flush=True)
    return path


if __name__ == "__main__":
    main()
