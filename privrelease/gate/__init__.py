"""privrelease's security perimeter in front of Prefect's server: people's accounts, one access table (``privrelease.gate.access``), and the worker's guard (``privrelease.gate.guard``)."""
