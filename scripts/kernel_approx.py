"""Error of Performer, Taylor and (1 + x/n)^n features against exp(q.k / sqrt d): JSON, PNG, table.

  python -m scripts.kernel_approx [--dim 16] [--out reports/kernel_approx] [--seed 0] [--pairs 256]
                                  [--draws 8]
"""
import json
import os

from absl import flags

from analysis import kernel_approx
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_integer("dim", 16, "dimension d of q and k", flag_values=FLAGS)
flags.DEFINE_string("out", "reports/kernel_approx", "folder for the JSON and the PNG", flag_values=FLAGS)
flags.DEFINE_integer("seed", 0, "seed of the pairs and projections", flag_values=FLAGS)
flags.DEFINE_integer("pairs", 256, "random (q, k) pairs per norm", flag_values=FLAGS)
flags.DEFINE_integer("draws", 8, "Performer projections per kind (smaller m use their leading rows)",
                     flag_values=FLAGS)


def error_table(result: dict) -> str:
    norms = result["norms"]
    headers = [f"norm {norm:.2g} (mean abs logit {logit:.2g})"
               for norm, logit in zip(norms, result["mean_abs_logit"])]
    lines = ["| kernel | order | feature dim | " + " | ".join(headers) + " |",
             "|---|---:|---:|" + "---:|" * len(norms)]
    errors = {(row["kernel"], row["feature_dim"], row["norm"]): row["relative_error"]
              for row in result["kernels"]}
    settings = dict.fromkeys((row["kernel"], row["order"], row["feature_dim"]) for row in result["kernels"])
    for kernel, order, feature_dim in settings:
        values = " | ".join(f"{errors[kernel, feature_dim, norm]:.2e}" for norm in norms)
        lines.append(f"| {kernel} | {'-' if order is None else order} | {feature_dim} | {values} |")
    return "\n".join(lines)


def monotonicity_summary(result: dict) -> str:
    """One line per family: the norms at which the error fell at every step up in feature dimension."""
    lines = []
    for kernel in kernel_approx.FAMILIES:
        falling, not_falling = [], []
        for norm in result["norms"]:
            errors = kernel_approx.family_curve(result, kernel, norm)[1]
            monotone = all(later < earlier for earlier, later in zip(errors, errors[1:]))
            (falling if monotone else not_falling).append(f"{norm:.2g}")
        lines.append(f"{kernel}: falls monotonically at norms [{', '.join(falling)}], "
                     f"not at [{', '.join(not_falling)}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = command_line.parse(FLAGS, argv, __doc__)

    result = kernel_approx.kernel_approximation_study(
        args.dim, seed=args.seed, num_pairs=args.pairs, num_draws=args.draws)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kernel_approx.json"), "w") as f:
        json.dump(result, f, indent=1)
    kernel_approx.plot_kernel_approximation(result, os.path.join(args.out, "kernel_approx.png"))
    print(error_table(result), monotonicity_summary(result), sep="\n\n")


if __name__ == "__main__":
    main()
