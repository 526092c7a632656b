"""Assessors: pure algorithms that decide whether a running trial is worth continuing."""
