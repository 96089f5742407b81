"""Tests never talk to W&B, whatever the environment says."""
import os

os.environ["WANDB_MODE"] = "disabled"
