"""Stores: append-only event logs. State is always a fold over what a store returns."""
