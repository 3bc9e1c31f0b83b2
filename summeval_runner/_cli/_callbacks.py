"""Hydra callbacks: after a sweep, compare its variants and write the report beside them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from summeval_runner._errors import SummevalError
from summeval_runner._io._compare import compare_loaded, load_runs
from summeval_runner._io._report import render_report

logger = logging.getLogger("summeval_runner")


def _job_number(run_dir: Path) -> int:
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    if not hydra_file.exists():
        return 1 << 30
    number = OmegaConf.select(OmegaConf.load(hydra_file), "hydra.job.num", default=None)
    return int(number) if number is not None else 1 << 30


class CompareSweep(Callback):
    """After a multirun: ``comparison.parquet`` and ``report.html`` in the sweep directory.

    The sweep's first job is the baseline the other variants are compared with.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        run_dirs = sorted(
            (manifest.parent for manifest in sweep_dir.rglob("manifest.json")),
            key=lambda run_dir: (_job_number(run_dir), str(run_dir)),
        )
        finished = [d for d in run_dirs if (d / "items.parquet").exists()]
        if len(finished) < 1:
            return
        baseline = finished[0] if len(finished) > 1 else None
        try:
            runs, base = load_runs(finished, baseline)
            comparison = compare_loaded(runs, base)
            comparison.to_parquet(sweep_dir / "comparison.parquet", index=False)
            report = render_report(runs, base, comparison, sweep_dir / "report.html")
        except (SummevalError, OSError) as error:
            logger.error("the sweep's comparison could not be written: %s", error)
            return
        print(f"sweep comparison: {sweep_dir / 'comparison.parquet'}\nsweep report: {report}")
