"""The ``privrelease`` command line: one module per command group (``main`` dispatches)."""
