"""Attention-rank metrics, kernel-approximation error and plots."""
