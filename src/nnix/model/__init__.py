"""Leaf data types shared by every layer: statuses, metric values, events, trial records.

Pure data: this package imports nothing from nnix except ``nnix.errors`` (guarded by
``tests/test_import_layers.py``).
"""
