"""Scope access, source authority and record lifecycle rules."""
