"""privrelease's security perimeter in front of Prefect's server: people's accounts, one policy table (``privrelease.gate.policy``), and the worker's guard (``privrelease.gate.guard``)."""
