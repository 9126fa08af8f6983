"""Placeholder: filled in by the next commits."""
from __future__ import annotations


def add_routes(router, base: str) -> None:
    """No routes yet."""


def attach(app) -> None:
    """No sampler yet."""
