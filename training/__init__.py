"""Training and evaluation: `train_and_evaluate(config, workdir)` and `evaluate(config, workdir)`."""
