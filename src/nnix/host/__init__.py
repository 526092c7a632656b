"""The manager host: the process that runs an experiment's manager (:mod:`nnix.host.run`, in the foreground
or as a daemon, :mod:`nnix.host.daemon`), what it builds the manager from (:mod:`nnix.host.build`), its
foreground output and exit codes (:mod:`nnix.host.progress`) and its log (:mod:`nnix.host.logs`). The CLI,
the Python API and NNI's ``nni.experiment`` API all start managers through it. Importing this package costs
nothing: each module is imported where it is used."""
