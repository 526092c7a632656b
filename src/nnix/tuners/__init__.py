"""Tuners: pure algorithms that propose parameter sets. One module per algorithm."""
