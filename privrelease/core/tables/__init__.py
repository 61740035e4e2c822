"""Tables: the public shape of a registered table, and how a steward's file is read into DuckDB."""
