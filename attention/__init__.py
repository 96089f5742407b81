"""Attention kinds behind one interface (see DESIGN.md), a registry and the multi-head wrapper.

Importing the package registers every kind.
"""
from attention import hard, linear, local, scored, softmax  # noqa: F401  (registration side effect)
from attention.multi_head import MultiHeadAttention
from attention.registry import all_options, create, names, options, register, select_options

__all__ = ["MultiHeadAttention", "all_options", "create", "names", "options", "register", "select_options"]
