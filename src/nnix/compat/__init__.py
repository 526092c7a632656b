"""Compatibility with Microsoft NNI at the edges.

:mod:`nnix.compat.nni_config` translates NNI's experiment YAML (v2 in any key spelling, legacy v1) to
the one native schema in :mod:`nnix.config`. No other module knows NNI's config shapes.
"""
