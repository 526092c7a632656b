"""Compatibility with Microsoft NNI at the edges, on top of nnix: NNI's launcher API ``nni.experiment``
(:mod:`nnix.compat.nni_experiment`, with its watcher :mod:`nnix.compat.nni_watch`) and the note about a real NNI
installed beside nnix (:mod:`nnix.compat.nni_presence`). NNI's config shapes are translated lower down, inside the
config package (:mod:`nnix.config.nni`), which imports nothing from here.
"""
