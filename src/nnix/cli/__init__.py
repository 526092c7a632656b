"""The `nnix` command line (also installed as `nnictl`)."""
