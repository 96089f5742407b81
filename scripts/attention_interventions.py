"""A trained softmax model's attention cut to rank m, its rows flattened by a temperature, or replaced by Hedgehog's
linear attention with its maps fitted to the trained rows, at evaluation only (studies/interventions.py): each seed
of a study's softmax run evaluated under each intervention, reported as a study's runs are (report.md,
results.json, plots). By default the rank-or-shape study's softmax at L = 128.

  python -m scripts.attention_interventions [--runs=runs/compare/mlm/rank_or_shape/softmax]
      [--interventions=none,rank=64,rank=32,rank=16,rank=8,temperature=2,temperature=4,temperature=8,hedgehog=0,
       hedgehog=300,hedgehog=1000]
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
table); the predictions above were not.

Hedgehog fitted to the trained rows (added after the interventions above had run; written before any of its
evaluations but one smoke check: 40 fitting steps on seed 0 read 26.9%). Every attention replaced by Hedgehog's
linear attention (phi = softmax(2 [xW, -xW]), m = 64 = 2 x head dim, so rank <= 64 at L = 128), every trained
parameter kept, and its maps W alone fitted by the paper's first stage (attention matching to the trained softmax's
weights on the same q and k, Adam at 1e-2, 300 or 1,000 training batches); hedgehog0 is the swap with W at the
identity, unfitted. If a linear map of this rank can hold the sharp rows softmax learned once taught them, the fitted
model's row entropy falls toward softmax's (0.61 of the maximum, within 0.05 of the rank-64 cut's 0.66) and its
accuracy lands within 5 points of the rank-64 cut's 41.2; if it cannot, its rows stay near elu + 1's flatness (0.85
or more) and its accuracy near the T = 4 flattening's 26 or below. Unfitted, the swap reads near T = 4 to 8's
accuracy (27 or below). Either way this is a model trained for softmax: it says what the map can represent when
shown the rows, not what a linear attention trained from scratch learns."""

CONTRASTS = (
    grids.Contrast("cut to rank 32", {"rank32": 1.0, "none": -1.0}),
    grids.Contrast("flattened by T = 4 (rows at linear attention's entropy, rank left free)",
                   {"temperature4": 1.0, "none": -1.0}),
    grids.Contrast("flattened by T = 4 minus cut to rank 32 (negative: flat rows cost more)",
                   {"temperature4": 1.0, "rank32": -1.0}),
    grids.Contrast("at equal row entropy (0.80 of the maximum): cut to rank 8 minus flattened by T = 2 (negative: "
                   "the rank cut costs more)", {"rank8": 1.0, "temperature2": -1.0}),
    grids.Contrast("Hedgehog fitted 1,000 steps minus cut to rank 64 (near 0: a rank-64 linear map taught the rows "
                   "keeps what the rank cut keeps)", {"hedgehog1000": 1.0, "rank64": -1.0}),
    grids.Contrast("Hedgehog fitted 1,000 steps minus unfitted (what fitting the maps to the rows recovers)",
                   {"hedgehog1000": 1.0, "hedgehog0": -1.0}),
)

FLAGS = flags.FlagValues()
flags.DEFINE_string("runs", "runs/compare/mlm/rank_or_shape/softmax",
                    "a study's run folder: its seed<k> workdirs (softmax in every role) are evaluated", flag_values=FLAGS)
flags.DEFINE_list("interventions", ["none", "rank=64", "rank=32", "rank=16", "rank=8", "temperature=2",
                                    "temperature=4", "temperature=8", "hedgehog=0", "hedgehog=300", "hedgehog=1000"],
                  "none, rank=<m> (weights cut to rank m), temperature=<T> (logits divided by T) or hedgehog=<steps> "
                  "(Hedgehog's maps fitted to the trained rows for that many batches)", flag_values=FLAGS)
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
