"""privrelease core: all release logic, usable and tested without Prefect."""

__version__ = "0.1.0"
