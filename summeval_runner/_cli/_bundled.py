"""Where the configs and the sample data that ship inside the package are.

Both are found from the installed package, never from a checkout or the current directory, so
``summeval-run`` runs the same from a wheel, an editable install, or a launcher's worker.

- The configs are read by Hydra as the package ``summeval_runner._configs`` (``CONFIG_PATH``).
  A primary ``pkg://`` source must be a module with an ``__init__.py``, hence a package, and a
  private one (``_``) like every module the public API does not name.
- The data files are in the package ``summeval_runner.data``; a config names one as
  ``${summeval.bundled:sample_articles.jsonl}``, which resolves to its absolute path.

In a checkout both are top-level folders, ``configs/`` and ``data/``, which pyproject.toml's
``package-dir`` maps onto those two packages: a wheel holds them inside ``summeval_runner/``, an
editable install's finder points the names at the checkout's folders. Either way the import
system finds them, never a path relative to this file.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

# For @hydra.main(config_path=...): the configs wherever the package is installed.
CONFIG_PATH = "pkg://summeval_runner._configs"
CONFIG_NAME = "config"

DATA_PACKAGE = "summeval_runner.data"


def _data_dir() -> Path:
    root = resources.files(DATA_PACKAGE)
    # A dataset is read by its path (and the manifest records it), so the files must be files on
    # disk: they are in a wheel or an editable install, not in a zipped one.
    if not isinstance(root, Path):
        raise RuntimeError(f"{DATA_PACKAGE} is not installed as files on disk (found {root!r})")
    return root.resolve()


def bundled_data(name: str) -> str:
    """The absolute path of the data file ``name`` that ships with the package.

    >>> Path(bundled_data("sample_articles.jsonl")).is_file()
    True
    """
    if not name or Path(name).name != name:
        raise ValueError(f"a bundled data file is named by its file name alone, got {name!r}")
    return str(_data_dir() / name)


def if_bundled(path: str, bundled: Any, otherwise: Any) -> Any:
    """``bundled`` when ``path`` is a data file that ships with the package, else ``otherwise``.

    The sample's field map (``input: text``, ``metadata: [title, domain]``) is the sample's:
    a ``dataset.path`` of the user's own starts from the seed's names (``id``, ``input``,
    ``output``, no metadata) instead of failing on the sample's columns one by one.

    >>> if_bundled(bundled_data("sample_articles.jsonl"), "text", "input")
    'text'
    >>> if_bundled("mine.csv", "text", "input")
    'input'
    """
    try:
        shipped = Path(path).resolve().parent == _data_dir()
    except (OSError, RuntimeError):
        shipped = False
    return bundled if shipped else otherwise


@functools.cache
def default_choices() -> dict[str, str]:
    """summeval-run's config groups and the option its primary config picks for each, read
    from that config's defaults list (``dataset: sample``, ``model: offline``, ...).

    >>> default_choices()["model"]
    'offline'
    """
    text = resources.files(CONFIG_PATH.removeprefix("pkg://")).joinpath(f"{CONFIG_NAME}.yaml")
    config = OmegaConf.create(text.read_text(encoding="utf-8"))
    assert isinstance(config, DictConfig)
    defaults = config.get("defaults", [])
    return {
        str(group): str(option)
        for entry in defaults
        if isinstance(entry, DictConfig)
        for group, option in entry.items()
        if " " not in str(group) and "/" not in str(group)  # not "override hydra/help"
    }


# Registered on import, not in main(): a launcher's worker process (joblib, Ray, Submitit)
# resolves the config without running main(). Pure functions, replaced idempotently.
OmegaConf.register_new_resolver("summeval.bundled", bundled_data, replace=True)
OmegaConf.register_new_resolver("summeval.if_bundled", if_bundled, replace=True)
