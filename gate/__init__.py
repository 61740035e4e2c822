"""privrelease's security perimeter in front of Prefect's server: people's accounts, one policy table (``gate.policy``), and the worker's guard (``gate.guard``)."""
