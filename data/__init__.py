"""The sample data that ships with the app, imported as ``summeval_runner.data``.

This folder is the repository's top-level ``data/``; pyproject.toml's ``package-dir`` maps it
onto ``summeval_runner.data``, so a wheel holds it inside the package. A package, not a plain
folder: an editable install finds a mapped folder only where it has an ``__init__.py``
(setuptools' editable finder), and ``summeval_runner/_cli/_bundled.py`` finds the files through
the import system, so they are found the same from a wheel and from a checkout.
"""
