"""privrelease: batch releases of privacy-protected data, orchestrated by Prefect.

The one import namespace: ``privrelease.core`` (every release step, pure and Prefect-free),
``privrelease.flows`` (the same steps as Prefect flows), ``privrelease.gate`` (who may do what in
front of Prefect's server) and ``privrelease.cli`` (the ``privrelease`` command).
"""

__version__ = "0.1.0"  # the one place the version is stated (pyproject.toml reads it)
