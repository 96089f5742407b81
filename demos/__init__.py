"""The demonstrations behind `python -m scripts.<name>`, each its computations and the report it writes:
attention as kernel regression (nadaraya_watson.py), why q.k is scaled by 1 / sqrt(d) (attention_scale.py),
feature maps against exp (kernel_approx.py), the size of the MLM corpus (corpus_stats.py)."""
