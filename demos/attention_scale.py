"""Why attention divides q.k by sqrt(d), measured on random unit-variance q and k: the computations and the
report of `python -m scripts.attention_scale` (its docstring names what it writes)."""
import json
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis.plots import counts_log_x  # noqa: E402

SCALINGS = {"unscaled": "q.k", "scaled": "q.k / sqrt(d)"}
TABLE_DIMS = (2, 8, 16, 64, 256, 1024)
SCAN_KINDS = ("dot", "softmax")
# configs/translation.py as the kinds study ran it: d_model 64 over 4 heads.
SCAN_HEAD_DIM = 16
PAIR_CHUNK = 2048  # pairs drawn at a time: 20,000 x 1,024 float32 twice would be 160 MB at once


def dims_up_to(max_dim: int) -> list[int]:
    """Powers of two from 2 to max_dim: evenly spaced on the log axis the plots use."""
    return [2**power for power in range(1, int(math.log2(max_dim)) + 1)]


def dot_product_variance(rng, dim: int, pairs: int) -> float:
    """Sample variance of q.k over `pairs` independent q, k with i.i.d. N(0, 1) entries; theory: dim."""
    dots = []
    for start in range(0, pairs, PAIR_CHUNK):
        size = min(PAIR_CHUNK, pairs - start)
        q = rng.standard_normal((size, dim), dtype=np.float32)
        k = rng.standard_normal((size, dim), dtype=np.float32)
        dots.append(np.einsum("pd,pd->p", q, k, dtype=np.float64))
    return float(np.var(np.concatenate(dots), ddof=1))


def softmax(scores):
    """Over the last axis, in float64: the unscaled rows at large d are one-hot to float32 precision."""
    exponentials = np.exp(scores - scores.max(-1, keepdims=True))
    return exponentials / exponentials.sum(-1, keepdims=True)


def logsumexp(scores):
    top = scores.max(-1)
    return top + np.log(np.exp(scores - top[..., None]).sum(-1))


def row_entropy(scores):
    """Entropy (nats) of softmax over the last axis, from the scores: log sum exp(s) - sum p s has no log 0."""
    return logsumexp(scores) - np.sum(softmax(scores) * scores, axis=-1)


def softmax_jacobian_norm(probabilities):
    """Frobenius norm of d softmax / d scores = diag(p) - p p^T, per row of [..., L] probabilities.

    1 - p_i is summed from the other p_j rather than subtracted from 1: near a one-hot row it is tiny, and
    the subtraction would lose it."""
    length = probabilities.shape[-1]
    others = probabilities[..., None, :] * (1 - np.eye(length))
    diagonal = probabilities * others.sum(-1)
    off_diagonal = probabilities[..., :, None] * others
    return np.sqrt(np.sum(diagonal**2, -1) + np.sum(off_diagonal**2, (-2, -1)))


def query_gradient_norm(probabilities, keys, scale: float):
    """Frobenius norm of d softmax(scale K q) / d q: row i is scale p_i (k_i - sum_j p_j k_j).

    probabilities [S, R, L], keys [S, L, D] -> [S, R]."""
    mean_key = np.einsum("srl,sld->srd", probabilities, keys)
    squared = np.sum((keys[:, None] - mean_key[:, :, None]) ** 2, -1)
    return scale * np.sqrt(np.sum(probabilities**2 * squared, -1))


def softmax_statistics(rng, dim: int, length: int, key_sets: int, queries: int) -> dict:
    """Entropy and gradient norms of softmax rows over `length` keys, each scaling, means over rows
    (medians too for the gradients: a few near-tied rows carry most of an unscaled mean)."""
    keys = rng.standard_normal((key_sets, length, dim))
    query_rows = rng.standard_normal((key_sets, queries, dim))
    dots = np.einsum("srd,sld->srl", query_rows, keys)
    statistics = {}
    for scaling, scale in (("unscaled", 1.0), ("scaled", dim**-0.5)):
        scores = dots * scale
        probabilities = softmax(scores)
        jacobian = softmax_jacobian_norm(probabilities)
        gradient = query_gradient_norm(probabilities, keys, scale)
        statistics[scaling] = {"entropy": float(row_entropy(scores).mean()),
                               "jacobian_mean": float(jacobian.mean()),
                               "jacobian_median": float(np.median(jacobian)),
                               "query_gradient_mean": float(gradient.mean()),
                               "query_gradient_median": float(np.median(gradient))}
    return statistics


def study(seed: int, dims: list[int], pairs: int, length: int, key_sets: int, queries: int) -> dict:
    rng = np.random.default_rng(seed)
    rows = []
    for dim in dims:
        variance = dot_product_variance(rng, dim, pairs)
        rows.append({"dim": dim, "dot_variance": variance, **softmax_statistics(rng, dim, length, key_sets, queries)})
        print(f"d = {dim}: Var[q.k] = {variance:.1f}, entropy unscaled {rows[-1]['unscaled']['entropy']:.3f}, "
              f"scaled {rows[-1]['scaled']['entropy']:.3f}")
    return {"settings": {"seed": seed, "dims": dims, "pairs": pairs, "length": length, "key_sets": key_sets,
                         "queries_per_key_set": queries},
            "max_entropy": math.log(length),
            "rows": rows}


def read_scan(path: str) -> dict:
    """Test exact match of `dot` and `softmax` in the translation kinds study: per seed, and their mean."""
    if not os.path.exists(path):
        raise SystemExit(f"{path}: not found. It is written by `python -m scripts.compare --task=translation "
                         f"--preset=kinds`; or pass --scan_results with another study's results.json.")
    with open(path) as f:
        results = json.load(f)
    scan = {}
    for kind in SCAN_KINDS:
        entries = results.get(kind) if isinstance(results, dict) else None
        if not entries or any("exact_match" not in entry.get("metrics", {}) for entry in entries):
            raise SystemExit(f"{path}: no test exact_match for run {kind!r}; it holds runs "
                             f"{', '.join(results) if isinstance(results, dict) else '(not an object)'}")
        matches = [entry["metrics"]["exact_match"] for entry in entries]
        scan[kind] = {"exact_match": matches, "mean": float(np.mean(matches)), "seeds": len(matches),
                      "step": entries[0].get("step"), "split": entries[0].get("split")}
    return scan


def _series(result: dict, scaling: str, statistic: str) -> list[float]:
    return [row[scaling][statistic] for row in result["rows"]]


def plot_scale(result: dict, path: str) -> None:
    dims = np.array(result["settings"]["dims"])
    variance = np.array([row["dot_variance"] for row in result["rows"]])
    fig, (var_ax, entropy_ax, jacobian_ax) = plt.subplots(1, 3, figsize=(13, 3.8))
    var_ax.plot(dims, variance, "o", color="tab:red", label="Var[q.k], sampled")
    var_ax.plot(dims, dims, color="black", lw=1, label="theory d")
    var_ax.plot(dims, variance / dims, "o", color="tab:blue", label="Var[q.k / sqrt d], sampled")
    var_ax.axhline(1, color="gray", lw=1, ls=":", label="theory 1")
    var_ax.set(yscale="log", xlabel="d", title="(i) variance of the score")

    colors = {"unscaled": "tab:red", "scaled": "tab:blue"}
    for scaling, label in SCALINGS.items():
        entropy_ax.plot(dims, _series(result, scaling, "entropy"), "o-", color=colors[scaling], label=label)
        jacobian_ax.plot(dims, _series(result, scaling, "jacobian_mean"), "o-", color=colors[scaling],
                         label=f"{label}: mean")
        jacobian_ax.plot(dims, _series(result, scaling, "jacobian_median"), "s--", color=colors[scaling],
                         label=f"{label}: median", alpha=0.7)
    length = result["settings"]["length"]
    entropy_ax.axhline(result["max_entropy"], color="gray", lw=1, label=f"log L (uniform over L = {length})")
    entropy_ax.axhline(result["max_entropy"] - 0.5, color="gray", lw=1, ls=":", label="log L - 1/2")
    entropy_ax.set(xlabel="d", ylabel="nats", title="(ii) mean entropy of a softmax row")
    jacobian_ax.set(yscale="log", xlabel="d",
                    title="(iii) |d softmax / d scores|_F per row")
    for ax in (var_ax, entropy_ax, jacobian_ax):
        counts_log_x(ax)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table(result: dict) -> str:
    lines = ["| d | Var[q.k] | Var / d | entropy, q.k | entropy, scaled | Jacobian mean, q.k | Jacobian mean, "
             "scaled | Jacobian median, q.k | Jacobian median, scaled | d/dq mean, q.k | d/dq median, q.k | "
             "d/dq mean, scaled |",
             "|---:|" + "---:|" * 11]
    for row in result["rows"]:
        if row["dim"] not in TABLE_DIMS:
            continue
        unscaled, scaled = row["unscaled"], row["scaled"]
        values = [f"{row['dot_variance']:.1f}", f"{row['dot_variance'] / row['dim']:.3f}",
                  f"{unscaled['entropy']:.3f}", f"{scaled['entropy']:.3f}",
                  f"{unscaled['jacobian_mean']:.3g}", f"{scaled['jacobian_mean']:.3g}",
                  f"{unscaled['jacobian_median']:.3g}", f"{scaled['jacobian_median']:.3g}",
                  f"{unscaled['query_gradient_mean']:.3g}", f"{unscaled['query_gradient_median']:.3g}",
                  f"{scaled['query_gradient_mean']:.3g}"]
        lines.append(f"| {row['dim']} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def _row(result: dict, dim: int) -> dict | None:
    return next((row for row in result["rows"] if row["dim"] == dim), None)


def scan_paragraph(result: dict, scan: dict, scan_path: str) -> str:
    dot, scaled = scan["dot"], scan["softmax"]
    seeds = {dot["seeds"], scaled["seeds"]}
    seed_words = "one seed" if seeds == {1} else f"{' and '.join(map(str, sorted(seeds)))} seeds (means)"
    text = (f"The lab's translation study of every kind (`{scan_path}`, SCAN, step {dot['step']}, {dot['split']} "
            f"split) trained the same Transformer with the unscaled `dot` kind and the scaled `softmax` kind: test "
            f"exact match {dot['mean']:.4f} for `dot` against {scaled['mean']:.4f} for `softmax`, {seed_words}. ")
    row = _row(result, SCAN_HEAD_DIM)
    if row:
        text += (f"Its heads are {SCAN_HEAD_DIM} wide; at d = {SCAN_HEAD_DIM} random scores already give unscaled "
                 f"rows of entropy {row['unscaled']['entropy']:.2f} nats against {row['scaled']['entropy']:.2f} "
                 f"scaled, though trained q and k are not i.i.d. unit normals. ")
    return text + ("With " + seed_words + " the gap is a single draw of initialisation and data order, not a "
                   "measured effect size; it agrees in direction with the curves above and no more.")


def _course(result: dict, statistic: str) -> str:
    """How an unscaled statistic moves over d, in words: its peak when the peak is inside the range."""
    dims, values = result["settings"]["dims"], _series(result, "unscaled", statistic)
    peak = int(np.argmax(values))
    course = f"is {values[0]:.3g} at d = {dims[0]}"
    if 0 < peak < len(values) - 1:
        course += f", peaks at {values[peak]:.3g} at d = {dims[peak]}"
    return course + f" and ends at {values[-1]:.3g} at d = {dims[-1]}"


def _span(result: dict, statistic: str) -> str:
    values = _series(result, "scaled", statistic)
    return f"[{min(values):.3g}, {max(values):.3g}]"


def _method(settings: dict, command: str) -> str:
    return f"""# Why attention scales q.k by 1 / sqrt(d)

Produced by

```
{command}
```

q and k have i.i.d. N(0, 1) entries, so q.k is a sum of d independent products of variance 1: Var[q.k] = d, \
and q.k / sqrt(d) has variance 1 at any d. Sampled at d = {', '.join(map(str, settings['dims']))}: \
{settings['pairs']} pairs per d for the variance; for the softmax, {settings['key_sets']} sets of \
L = {settings['length']} keys with {settings['queries_per_key_set']} queries each \
({settings['key_sets'] * settings['queries_per_key_set']} rows per d); seed {settings['seed']}.

Gradient measure: the Frobenius norm of the softmax's Jacobian with respect to its input scores, \
|diag(p) - p p^T|_F, per row. Every gradient that reaches q or k through attention passes through this matrix \
whatever the loss above it, so it measures how much of a loss gradient the softmax lets back, with no random \
direction to average over (the gradient of sum(softmax * c) for c ~ N(0, I) has this norm in mean square). \
Means and medians over rows: as d grows, unscaled rows are near one-hot, but the rare near-tied rows keep \
the mean up far longer than the median. "d/dq" is the full gradient norm with respect to the query, \
|d softmax(s K q) / d q|_F with s = 1 or 1 / sqrt(d): it adds the keys' length, about sqrt(d), which the \
scale cancels.
"""


def _findings(result: dict) -> str:
    rows = result["rows"]
    first, last = rows[0], rows[-1]
    ratio = [row["dot_variance"] / row["dim"] for row in rows]
    return f"""- Variance: Var[q.k] / d ranges over [{min(ratio):.3f}, {max(ratio):.3f}] across d (theory 1).
- Entropy (maximum log L = {result['max_entropy']:.3f}): unscaled it falls from \
{first['unscaled']['entropy']:.3f} at d = {first['dim']} to {last['unscaled']['entropy']:.3f} at \
d = {last['dim']}: rows collapse towards one-hot. Scaled it stays between \
{min(_series(result, 'scaled', 'entropy')):.3f} and {max(_series(result, 'scaled', 'entropy')):.3f}, near \
log L - 1/2 = {result['max_entropy'] - 0.5:.3f}, the large-L entropy of unit-variance Gaussian scores.
- Jacobian, unscaled: the median {_course(result, 'jacobian_median')}; the mean \
{_course(result, 'jacobian_mean')}. A rise at small d is expected: soft rows sharpening towards a few \
near-equal keys pass more gradient (a two-way tie has norm 0.5, a uniform row about 1 / sqrt(L)) before \
they turn one-hot. Scaled, the mean stays in {_span(result, 'jacobian_mean')}.
- With respect to q, unscaled: the median {_course(result, 'query_gradient_median')}, but the mean \
{_course(result, 'query_gradient_mean')}: the sqrt(d)-long keys amplify the few near-tied rows. Unscaled \
attention does not silence every gradient; it makes them erratic, most rows passing almost none and a few \
passing much. Scaled, the mean stays in {_span(result, 'query_gradient_mean')}.
"""


def markdown(result: dict, scan: dict, scan_path: str, command: str) -> str:
    return f"""{_method(result["settings"], command)}
## Results

{table(result)}

{_findings(result)}
## On SCAN

{scan_paragraph(result, scan, scan_path)}

![variance, entropy and Jacobian against d](scale.png)
"""


def run(options, command: str) -> dict:
    """The demonstration as the flags of scripts/attention_scale.py (`options`) ask, reported under `command`,
    the command line that ran it: results.json, report.md and scale.png under options.out; returns the
    result."""
    scan = read_scan(options.scan_results)  # before the study: a missing file should fail at once
    result = study(options.seed, dims_up_to(options.max_dim), options.pairs, options.length, options.key_sets,
                   options.queries)
    result["scan"] = {"path": options.scan_results, **scan}
    print(table(result))
    print(f"SCAN test exact match: dot {scan['dot']['mean']:.4f}, softmax {scan['softmax']['mean']:.4f}")
    os.makedirs(options.out, exist_ok=True)
    paths = [os.path.join(options.out, name) for name in ("results.json", "report.md", "scale.png")]
    with open(paths[0], "w") as f:
        json.dump(result, f, indent=1)
    with open(paths[1], "w") as f:
        f.write(markdown(result, scan, options.scan_results, command))
    plot_scale(result, paths[2])
    print(f"written: {', '.join(paths)}")
    return result
