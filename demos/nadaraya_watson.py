"""Attention as Nadaraya-Watson kernel regression on a 1-D toy problem: the estimators, the learned kernel
width, and the report of `python -m scripts.nadaraya_watson` (its docstring names what it writes)."""
import json
import os

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

import attention  # noqa: E402

TEST_QUERIES = np.arange(50, dtype=np.float32) * 0.1  # 0, 0.1, ..., 4.9
DOMAIN = (0.0, 5.0)
EDGE = 0.5  # queries this close to an end of the domain have training points on one side only
GRID_WIDTHS = np.geomspace(0.3, 20.0, 60)
ESTIMATORS = ("average_pooling", "fixed_kernel", "learned_kernel")
LABELS = {"average_pooling": "average pooling", "fixed_kernel": "fixed width", "learned_kernel": "learned width"}
LOSS_POINTS = 100  # the leave-one-out curve in the JSON keeps about this many of its steps


def truth(x):
    return 2 * np.sin(x) + x**0.8


def make_data(seed: int, num_train: int, noise_std: float):
    """Sorted training inputs uniform in DOMAIN with noisy targets; the test queries with noiseless ones."""
    rng = np.random.default_rng(seed)
    x_train = np.sort(rng.uniform(*DOMAIN, num_train)).astype(np.float32)
    y_train = (truth(x_train) + rng.normal(0.0, noise_std, num_train)).astype(np.float32)
    return x_train, y_train, TEST_QUERIES, truth(TEST_QUERIES).astype(np.float32)


def kernel_weights(queries, keys, width: float, leave_one_out: bool = False):
    """Closed form softmax_i(-((x - x_i) w)^2 / 2): [Lq], [Lk] -> [Lq, Lk]; leave_one_out drops the diagonal."""
    scores = -0.5 * ((queries[:, None] - keys[None, :]) * width) ** 2
    if leave_one_out:
        scores = jnp.where(jnp.eye(len(keys), dtype=bool), -jnp.inf, scores)
    return jax.nn.softmax(scores, axis=-1)


def gaussian_kind(width: float = 1.0):
    """The lab's `gaussian` kind on scalar queries and keys with kernel width w.

    Its score is -(p / 2) |q - k|^2 with precision p = softplus(raw_precision), so w = sqrt(p); at head_dim 1
    it starts at p = 1 / sqrt(1) = 1, the fixed kernel."""
    kind = attention.create("gaussian", num_heads=1, head_dim=1, rngs=nnx.Rngs(0))
    kind.raw_precision[...] = jnp.full((1,), np.log(np.expm1(width**2)), jnp.float32)
    return kind


def kind_width(kind) -> float:
    return float(jnp.sqrt(jax.nn.softplus(kind.raw_precision[...][0])))


def _as_heads(values):
    """[L] -> [B=1, L, H=1, D=1], the layout every kind takes."""
    return jnp.asarray(values, jnp.float32)[None, :, None, None]


def leave_one_out_mask(length: int):
    """Each training point attends to the others only: with itself allowed, w -> infinity memorises y."""
    return ~jnp.eye(length, dtype=bool)[None, None]


def attend(kind, queries, keys, values, mask=None):
    return kind(_as_heads(queries), _as_heads(keys), _as_heads(values), mask)[0, :, 0, 0]


def attention_weights(kind, queries, keys):
    return kind.weights(_as_heads(queries), _as_heads(keys))[0, 0]


def train_width(x_train, y_train, steps: int, learning_rate: float):
    """Adam on the kind's raw precision against the leave-one-out squared error: (kind, loss per step).

    The raw parameter lives on the scale of w^2 (softplus is near the identity there), so plain SGD creeps
    towards the optimum; Adam's steps do not depend on the gradient's size."""
    kind = gaussian_kind()
    graphdef, params, rest = nnx.split(kind, nnx.Param, ...)
    mask = leave_one_out_mask(len(x_train))

    def loss_fn(params):
        predictions = attend(nnx.merge(graphdef, params, rest), x_train, x_train, y_train, mask)
        return jnp.mean((predictions - y_train) ** 2)

    optimizer = optax.adam(learning_rate)

    @jax.jit
    def step(params, opt_state):
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state = optimizer.init(params)
    losses = []
    for _ in range(steps):
        params, opt_state, loss = step(params, opt_state)
        losses.append(float(loss))
    losses.append(float(loss_fn(params)))  # after the last update
    return nnx.merge(graphdef, params, rest), losses


def loss_curve(losses: list[float]) -> dict:
    """Every k-th step's loss and the last one's: the whole curve would make most of the JSON."""
    every = max(1, len(losses) // LOSS_POINTS)
    steps = sorted({*range(0, len(losses), every), len(losses) - 1})
    return {"step": steps, "loss": [losses[step] for step in steps]}


def mse(predictions, targets) -> float:
    return float(np.mean((np.asarray(predictions) - np.asarray(targets)) ** 2))


def effective_keys(weights) -> float:
    """Mean over queries of 1 / sum_i p_i^2: how many training points a query effectively averages."""
    return float(np.mean(1.0 / np.sum(np.asarray(weights) ** 2, axis=-1)))


def error_parts(weights, x_train, y_train, y_test) -> dict:
    """Mean squares of the two parts of a kernel's test error, known exactly here since the noise is:
    bias sum_i p_i f(x_i) - f(x) (a wide kernel averages a curved f) and noise sum_i p_i eps_i (a narrow one
    averages few eps_i). MSE = bias + noise + twice their mean product."""
    weights = np.asarray(weights, np.float64)
    bias = weights @ truth(x_train.astype(np.float64)) - y_test
    noise = weights @ (y_train - truth(x_train.astype(np.float64)))
    return {"bias": float(np.mean(bias**2)), "noise": float(np.mean(noise**2)),
            "per_query": {"bias": bias.tolist(), "noise": noise.tolist()}}


def width_scan(x_train, y_train, x_test, y_test):
    """Leave-one-out loss and test MSE of the closed form at each of GRID_WIDTHS."""
    loo = [mse(kernel_weights(x_train, x_train, w, leave_one_out=True) @ y_train, y_train) for w in GRID_WIDTHS]
    test = [mse(kernel_weights(x_test, x_train, w) @ y_train, y_test) for w in GRID_WIDTHS]
    return {"widths": GRID_WIDTHS.tolist(), "loo_loss": loo, "test_mse": test}


def region_mse(predictions: dict, x_test, y_test) -> dict:
    regions = {f"left edge [0, {EDGE})": x_test < DOMAIN[0] + EDGE,
               f"interior [{EDGE}, {DOMAIN[1] - EDGE})": (x_test >= DOMAIN[0] + EDGE) & (x_test < DOMAIN[1] - EDGE),
               f"right edge [{DOMAIN[1] - EDGE}, {DOMAIN[1]:g})": x_test >= DOMAIN[1] - EDGE}
    return {region: {name: mse(np.asarray(pred)[inside], y_test[inside]) for name, pred in predictions.items()}
            for region, inside in regions.items()}


def study(seed: int, num_train: int, noise_std: float, steps: int, learning_rate: float) -> dict:
    x_train, y_train, x_test, y_test = make_data(seed, num_train, noise_std)
    fixed = gaussian_kind(1.0)
    learned, losses = train_width(x_train, y_train, steps, learning_rate)
    width = kind_width(learned)
    predictions = {"average_pooling": np.full_like(y_test, y_train.mean()),
                   "fixed_kernel": np.asarray(attend(fixed, x_test, x_train, y_train)),
                   "learned_kernel": np.asarray(attend(learned, x_test, x_train, y_train))}
    closed_form = {"fixed_kernel": kernel_weights(x_test, x_train, 1.0) @ y_train,
                   "learned_kernel": kernel_weights(x_test, x_train, width) @ y_train}
    weights = {"fixed_kernel": np.asarray(attention_weights(fixed, x_test, x_train)),
               "learned_kernel": np.asarray(attention_weights(learned, x_test, x_train))}
    errors = {name: np.abs(pred - y_test) for name, pred in predictions.items()}
    return {
        "settings": {"seed": seed, "num_train": num_train, "noise_std": noise_std, "steps": steps,
                     "learning_rate": learning_rate, "optimizer": "adam",
                     "loss": "mean squared leave-one-out error on the training set"},
        "kind_parametrisation": "gaussian kind: score -(p / 2)(q - k)^2, p = softplus(raw_precision) = w^2",
        "test_mse": {name: mse(pred, y_test) for name, pred in predictions.items()},
        "width": {"fixed_kernel": 1.0, "learned_kernel": width},
        "learned_precision": width**2,
        "learned_raw_precision": float(learned.raw_precision[...][0]),
        "loo_loss": {"fixed_kernel": losses[0], "learned_kernel": losses[-1], "curve": loss_curve(losses)},
        "kind_vs_closed_form_max_abs": max(float(np.max(np.abs(predictions[name] - closed_form[name])))
                                           for name in closed_form),
        "effective_keys": {name: effective_keys(w) for name, w in weights.items()},
        "region_mse": region_mse(predictions, x_test, y_test),
        "learned_closer_fraction": float(np.mean(errors["learned_kernel"] < errors["fixed_kernel"])),
        "worst_error": {name: {"x": float(x_test[np.argmax(err)]), "abs_error": float(err.max())}
                        for name, err in errors.items()},
        "error_parts": {name: error_parts(w, x_train, y_train, y_test) for name, w in weights.items()},
        "width_scan": width_scan(x_train, y_train, x_test, y_test),
        "data": {"x_train": x_train.tolist(), "y_train": y_train.tolist(), "x_test": x_test.tolist(),
                 "y_test": y_test.tolist()},
        "predictions": {name: np.asarray(pred).tolist() for name, pred in predictions.items()},
        "weights": {name: w.tolist() for name, w in weights.items()},
    }


def plot_fit(result: dict, path: str) -> None:
    data = result["data"]
    fig, (fit_ax, scan_ax) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    dense = np.linspace(*DOMAIN, 200)
    fit_ax.plot(dense, truth(dense), color="black", lw=1.5, label="truth 2 sin x + x^0.8")
    fit_ax.scatter(data["x_train"], data["y_train"], s=12, color="gray", alpha=0.7, label="training points")
    for name, color in zip(ESTIMATORS, ("tab:orange", "tab:blue", "tab:red")):
        width = f" w = {result['width'][name]:.2f}" if name in result["width"] else ""
        fit_ax.plot(data["x_test"], result["predictions"][name], color=color,
                    label=f"{LABELS[name]}{width} (test MSE {result['test_mse'][name]:.3f})")
    fit_ax.set(xlabel="x", ylabel="y", title="Fits at the test queries")
    fit_ax.legend(fontsize=7)

    scan = result["width_scan"]
    scan_ax.plot(scan["widths"], scan["loo_loss"], color="tab:purple", label="leave-one-out loss (train)")
    scan_ax.plot(scan["widths"], scan["test_mse"], color="tab:green", label="test MSE")
    for name, style in (("fixed_kernel", ":"), ("learned_kernel", "--")):
        scan_ax.axvline(result["width"][name], color="gray", ls=style, lw=1,
                        label=f"{LABELS[name]} w = {result['width'][name]:.2f}")
    scan_ax.set(xscale="log", yscale="log", xlabel="kernel width w", title="Closed form against w")
    scan_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_attention(result: dict, path: str) -> None:
    data = result["data"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, name in zip(axes, ("fixed_kernel", "learned_kernel")):
        # pcolormesh at the inputs themselves: the training keys are unevenly spaced.
        mesh = ax.pcolormesh(data["x_train"], data["x_test"], np.asarray(result["weights"][name]),
                             shading="nearest", cmap="viridis")
        fig.colorbar(mesh, ax=ax, fraction=0.046)
        ax.set(xlabel="training key x_i", ylabel="test query x", aspect="equal",
               title=f"w = {result['width'][name]:.2f}: ~{result['effective_keys'][name]:.1f} keys per query")
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def mse_table(result: dict) -> str:
    regions = list(result["region_mse"])
    lines = ["| estimator | width w | test MSE | " + " | ".join(f"MSE {region}" for region in regions)
             + " | bias part | noise part |",
             "|---|---:|---:|" + "---:|" * len(regions) + "---:|---:|"]
    for name in ESTIMATORS:
        width = f"{result['width'][name]:.3f}" if name in result["width"] else "-"
        by_region = " | ".join(f"{result['region_mse'][region][name]:.4f}" for region in regions)
        parts = result["error_parts"].get(name)
        parts = f"{parts['bias']:.4f} | {parts['noise']:.4f}" if parts else "- | -"
        lines.append(f"| {LABELS[name]} | {width} | {result['test_mse'][name]:.4f} | {by_region} | {parts} |")
    return "\n".join(lines)


def _parts_at(result: dict, name: str, x: float, only: str | None = None) -> str:
    """A kernel's bias and noise parts at test query x, in words: the larger one first, or `only` one."""
    index = int(np.argmin(np.abs(np.asarray(result["data"]["x_test"]) - x)))
    parts = {part: values[index] for part, values in result["error_parts"][name]["per_query"].items()}
    if only:
        return f"{parts[only]:+.2f}"
    larger, smaller = sorted(parts, key=lambda part: -abs(parts[part]))
    return f"mostly {larger} ({larger} {parts[larger]:+.2f}, {smaller} {parts[smaller]:+.2f})"


def reading(result: dict) -> str:
    """The paragraph of the report, its comparisons taken from the numbers rather than assumed."""
    width = result["width"]["learned_kernel"]
    fixed_mse, learned_mse = result["test_mse"]["fixed_kernel"], result["test_mse"]["learned_kernel"]
    scan = result["width_scan"]
    best_test = scan["widths"][int(np.argmin(scan["test_mse"]))]
    best_loo = scan["widths"][int(np.argmin(scan["loo_loss"]))]
    fixed, learned = result["error_parts"]["fixed_kernel"], result["error_parts"]["learned_kernel"]
    worst_fixed, worst_learned = result["worst_error"]["fixed_kernel"], result["worst_error"]["learned_kernel"]
    regions = result["region_mse"]
    worst_region = max(regions, key=lambda region: regions[region]["learned_kernel"])
    return (
        f"Trained on the leave-one-out error, the width went from 1 to w = {width:.2f}: a kernel "
        f"{'narrower' if width > 1 else 'wider'} by {max(width, 1 / width):.1f}, under which a test query "
        f"averages about {result['effective_keys']['learned_kernel']:.1f} training points instead of "
        f"{result['effective_keys']['fixed_kernel']:.1f} (1 / sum p^2, mean over queries). It "
        f"{'lowers' if learned_mse < fixed_mse else 'raises'} the test MSE from {fixed_mse:.4f} to "
        f"{learned_mse:.4f} (average pooling: {result['test_mse']['average_pooling']:.4f}) and is closer to the "
        f"truth at {100 * result['learned_closer_fraction']:.0f}% of the test queries. Since the noise is known, "
        f"each kernel's error splits exactly into a bias part (the kernel average of the truth minus the truth) "
        f"and a noise part (the kernel average of the noise). The fixed kernel's error is nearly all bias "
        f"({fixed['bias']:.4f} against {fixed['noise']:.4f} of noise): it averages across the bend of 2 sin x, "
        f"flattening crest and trough, and at the ends of the domain it sees neighbours on one side only (worst "
        f"error {worst_fixed['abs_error']:.2f} at x = {worst_fixed['x']:.1f}). The narrow kernel cuts the bias to "
        f"{learned['bias']:.4f} and pays in noise, {learned['noise']:.4f}, "
        f"{learned['noise'] / fixed['noise']:.1f} times the fixed kernel's: its curve carries the bumps of the "
        f"few points near each query. Its worst region is the {worst_region} "
        f"(MSE {regions[worst_region]['learned_kernel']:.4f}); its worst error, {worst_learned['abs_error']:.2f} "
        f"at x = {worst_learned['x']:.1f}, is {_parts_at(result, 'learned_kernel', worst_learned['x'])}, and the "
        f"one-sided average persists at the ends, shorter: bias {_parts_at(result, 'learned_kernel', 0.0, 'bias')} "
        f"at x = 0 (fixed kernel: {_parts_at(result, 'fixed_kernel', 0.0, 'bias')}). The "
        f"leave-one-out loss is flat near its minimum (w ~ {best_loo:.1f} on the grid of fit.png) and does not "
        f"pick the width best on the test queries (w ~ {best_test:.1f}, test MSE {min(scan['test_mse']):.4f}): "
        f"{result['settings']['num_train']} noisy points pin the width down loosely. One draw of data and noise "
        f"(seed {result['settings']['seed']})."
    )


def markdown(result: dict, command: str) -> str:
    settings = result["settings"]
    width = result["width"]["learned_kernel"]
    loo = result["loo_loss"]
    return f"""# Nadaraya-Watson regression as attention

Produced by

```
{command}
```

{settings['num_train']} training inputs x_i sorted uniform in [0, 5), targets y_i = 2 sin(x_i) + x_i^0.8 plus noise \
N(0, {settings['noise_std']}^2) (seed {settings['seed']}); test queries x = 0, 0.1, ..., 4.9 against the noiseless \
truth. Estimators: average pooling f(x) = mean(y_i); f(x) = sum_i softmax_i(-((x - x_i) w)^2 / 2) y_i with w = 1; \
the same with w learned. Both kernels run through the lab's `gaussian` attention kind (one head, queries, keys and \
values of width 1); its predictions equal the closed form to {result['kind_vs_closed_form_max_abs']:.1e}.

## Test MSE

Bias part and noise part: mean squares of the two parts of the error (see the reading); with twice their mean \
product they add up to the test MSE.

{mse_table(result)}

## Learned width

The kind's score is -(p / 2)(q - k)^2 with precision p = softplus(raw_precision), one per head, so the closed \
form's width is w = sqrt(p): p = w^2, raw_precision = log(exp(w^2) - 1). At head_dim 1 the kind starts at \
p = 1 / sqrt(head_dim) = 1, the fixed kernel. Adam (learning rate {settings['learning_rate']:g}, \
{settings['steps']} steps) trains the raw precision, each training point attending to the other training points \
only: with itself allowed, w -> infinity reproduces every y_i and the loss goes to 0.

- learned w = {width:.4f} (p = {result['learned_precision']:.3f}, raw_precision = {result['learned_raw_precision']:.3f})
- leave-one-out MSE: {loo['fixed_kernel']:.4f} at w = 1, {loo['learned_kernel']:.4f} after training

## Reading

{reading(result)}

![fits, and the closed form's losses against w](fit.png)

Attention weights of the test queries over the training keys, each panel on its own colour scale:

![attention weights](attention.png)
"""


def run(options, command: str) -> dict:
    """The demonstration as the flags of scripts/nadaraya_watson.py (`options`) ask, reported under `command`,
    the command line that ran it: results.json, report.md, fit.png and attention.png under options.out;
    returns the result."""
    print(f"training the width: {options.steps} steps on {options.num_train} points")
    result = study(options.seed, options.num_train, options.noise_std, options.steps, options.learning_rate)
    print(mse_table(result))
    print(f"learned w = {result['width']['learned_kernel']:.4f}")
    os.makedirs(options.out, exist_ok=True)
    paths = [os.path.join(options.out, name) for name in ("results.json", "report.md", "fit.png", "attention.png")]
    with open(paths[0], "w") as f:
        # The attention matrices are for the heat maps only: the JSON keeps what they are computed from.
        json.dump({key: value for key, value in result.items() if key != "weights"}, f, indent=1)
    with open(paths[1], "w") as f:
        f.write(markdown(result, command))
    plot_fit(result, paths[2])
    plot_attention(result, paths[3])
    print(f"written: {', '.join(paths)}")
    return result
