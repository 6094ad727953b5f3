"""Offline implementations of the cognition skills: deterministic rules, not an LLM.

They run when no LLM is configured (``ARANDU_LLM_PROVIDER=offline``) and as the
fallback when an LLM answers something unusable. They are honest about what they
are: keyword, pattern and overlap heuristics that cost no tokens, give the same
output for the same input every time, and understand far less than a model does.
A memory written by them is plainer (fewer facts, coarser links and tags), never
invented.
"""
