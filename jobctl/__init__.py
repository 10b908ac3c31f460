"""jobctl: a persistent job queue kept in one SQLite file, and the operator tool around it."""

__version__ = "0.1.0"
