"""The app's Hydra configs, read by Hydra as ``pkg://summeval_runner._configs``.

A package, not a plain folder: Hydra finds a primary ``pkg://`` config source only in a module
with an ``__init__.py``. Private like every module but the package itself; add options of your
own with ``--config-dir`` rather than editing these.
"""
