"""ml_collections configs: `get_config(arg)` per task, presets by arg, overrides from the command line."""
