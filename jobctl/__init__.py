"""jobctl: a persistent job queue kept in a SQLite file or a PostgreSQL database, and the operator tool around it."""

__version__ = "0.1.0"
