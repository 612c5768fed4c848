"""Operators of this family (being written in this session)."""
