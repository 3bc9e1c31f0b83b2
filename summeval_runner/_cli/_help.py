"""The config groups a ``--help`` lists: the ones its app runs with.

``summeval-run`` and ``summeval-agree`` share one config folder, so Hydra's
``$APP_CONFIG_GROUPS`` lists each app's groups in the other's help (``human=binary`` in
``summeval-run --help``, which then refuses it). A help template names its groups with
``${summeval.config_groups:human}`` instead: every group Hydra's config loader can see (the
bundled ones and those of each ``--config-dir``), with its options, less the groups named.
"""

from __future__ import annotations

from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError
from omegaconf import OmegaConf

HYDRA_GROUP = "hydra"


def _groups(parent: str = "", left_out: tuple[str, ...] = ()) -> list[str]:
    """Every config group under ``parent`` that holds options, nested groups included, less
    the top-level groups ``left_out`` (not walked: each look at a group costs Hydra a copy of
    its config repository, and ``hydra/`` alone holds a dozen)."""
    loader = GlobalHydra.instance().config_loader()
    found: list[str] = []
    for name in loader.list_groups(parent):
        if not parent and name in left_out:
            continue
        group = f"{parent}/{name}" if parent else name
        if loader.get_group_options(group, ObjectType.CONFIG):
            found.append(group)
        if loader.get_group_options(group, ObjectType.GROUP):
            found.extend(_groups(group))
    return found


def config_groups(*left_out: str) -> str:
    """``group: option, option`` lines, as Hydra's ``$APP_CONFIG_GROUPS`` writes them, for the
    groups that are neither Hydra's own nor in ``left_out``."""
    if not GlobalHydra.instance().is_initialized():
        raise ConfigLoadError("the config groups are listed only while Hydra runs the app")
    loader = GlobalHydra.instance().config_loader()
    lines = []
    for group in sorted(_groups(left_out=(HYDRA_GROUP, *left_out))):
        lines.append(f"{group}: {', '.join(sorted(loader.get_group_options(group)))}")
    return "\n".join(lines)


OmegaConf.register_new_resolver("summeval.config_groups", config_groups, replace=True)
