"""Prefect flows, one per workload, and the one place their steps become Prefect tasks (``privrelease.flows.steps``)."""
