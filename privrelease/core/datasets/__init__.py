"""Datasets: what the steward registered (the registry), the snapshots it stores, their validation,
the demo datasets, and moving a home's registrations and ledger to PostgreSQL."""
