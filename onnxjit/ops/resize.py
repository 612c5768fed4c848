"""Resize and Upsample (in progress)."""

from __future__ import annotations
