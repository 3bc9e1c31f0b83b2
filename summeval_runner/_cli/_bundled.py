"""Where the configs and the sample data that ship inside the package are.

Both are found from the installed package, never from a checkout or the current directory, so
``summeval-run`` runs the same from a wheel, an editable install, or a launcher's worker.

- The configs are read by Hydra as the package ``summeval_runner._configs`` (``CONFIG_PATH``).
  A primary ``pkg://`` source must be a module with an ``__init__.py``, hence a package, and a
  private one (``_``) like every module the public API does not name.
- The data files are in ``summeval_runner/data/``; a config names one as
  ``${summeval.bundled:sample_articles.jsonl}``, which resolves to its absolute path.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

# For @hydra.main(config_path=...): the configs wherever the package is installed.
CONFIG_PATH = "pkg://summeval_runner._configs"
CONFIG_NAME = "config"

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def bundled_data(name: str) -> str:
    """The absolute path of the data file ``name`` that ships with the package.

    >>> Path(bundled_data("sample_articles.jsonl")).is_file()
    True
    """
    if not name or Path(name).name != name:
        raise ValueError(f"a bundled data file is named by its file name alone, got {name!r}")
    return str(DATA_DIR / name)


# Registered on import, not in main(): a launcher's worker process (joblib, Ray, Submitit)
# resolves the config without running main(). A pure function, replaced idempotently.
OmegaConf.register_new_resolver("summeval.bundled", bundled_data, replace=True)
