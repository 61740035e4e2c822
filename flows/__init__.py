"""Prefect flows (one per workload) and the ``privrelease`` command line."""
