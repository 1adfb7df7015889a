"""The version of cronbus."""

__version__ = "0.1.0"
