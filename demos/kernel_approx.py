"""The error of Performer, Taylor and (1 + x/n)^n features against exp(q.k / sqrt d), as
`python -m scripts.kernel_approx` reports it: the study (analysis/kernel_approx.py) written to JSON and PNG,
its table printed."""
import json
import os

from analysis import kernel_approx


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


def run(options) -> dict:
    """The study as the flags of scripts/kernel_approx.py (`options`) ask: kernel_approx.json and .png under
    options.out, the error table and the monotonicity summary printed; returns the result."""
    result = kernel_approx.kernel_approximation_study(
        options.dim, seed=options.seed, num_pairs=options.pairs, num_draws=options.draws)
    os.makedirs(options.out, exist_ok=True)
    with open(os.path.join(options.out, "kernel_approx.json"), "w") as f:
        json.dump(result, f, indent=1)
    kernel_approx.plot_kernel_approximation(result, os.path.join(options.out, "kernel_approx.png"))
    print(error_table(result), monotonicity_summary(result), sep="\n\n")
    return result
