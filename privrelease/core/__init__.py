"""privrelease core: all release logic, usable and tested without Prefect."""
