"""Prefect tasks: thin wrappers over ``core``."""
