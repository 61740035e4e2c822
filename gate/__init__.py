"""privrelease's gate in front of Prefect's server: accounts, roles and one policy table (``gate.policy``)."""
