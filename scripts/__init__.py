"""The command lines over runs, each `python -m scripts.<name>`: its flags, then one call into studies/,
benchmarks/ or demos/."""
