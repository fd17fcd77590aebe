"""The pipeline's errors in the input: each ends a command or a job in one line."""

from __future__ import annotations


class ConfigError(ValueError):
    """The configuration is invalid; the message names the offending key or file."""


class InputError(ValueError):
    """Data a stage reads is unusable (NaN, wrong shape, ...); the message names the file."""
