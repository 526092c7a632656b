"""nnix's version, in a module of its own so that any layer can name it without importing the ``nnix`` package's
public API (which resolves ``nnix.Experiment`` from the top layer)."""

__version__ = "0.1.0"
