"""Activation: which memories are part of every session's profile, and who decides it.

The policy (:mod:`retold.activation.policy`) judges a committed record ambient,
conditional or for review from facts it is handed, with the categories it reads in the
record's words (:mod:`retold.activation.categories`); the activator
(:mod:`retold.activation.activator`) gathers those facts after each write and applies a
person's decisions from the review queue. What stays elsewhere, by layer: the
``activation:`` config section beside every other section in ``retold/config/``, the SQL
of the activation rows in ``retold/store/activation.py``, and the profile block that
reads the ambient set in ``retold/retrieve/profile.py``, on the read path.
"""
