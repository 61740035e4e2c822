"""Charged runs: the one path every run the ledger charges goes through (``charged``), a release's
request, steps, preview and publication, and the spam filter's training run."""
