"""The trial agent side: launching trials and exchanging parameters and metrics with them.

A trial and its agent share a channel directory (named to the trial by ``NNIX_TRIAL_CHANNEL``):
the agent writes ``parameter.json`` before launch and tails ``metrics.jsonl``, which the trial SDK
(:mod:`nnix.trial`) appends to. See :mod:`nnix.agent.channel`.
"""
