"""The app's Hydra configs, read by Hydra as ``pkg://summeval_runner._configs``.

This folder is the repository's top-level ``configs/``; pyproject.toml's ``package-dir`` maps it
onto ``summeval_runner._configs``, so a wheel holds it inside the package. A package, not a plain
folder: Hydra finds a primary ``pkg://`` config source only in a module with an ``__init__.py``,
and an editable install finds a mapped folder only where it has one. Private like every module
but the package itself; add options of your own with ``--config-dir`` rather than editing these.
"""
