"""Guards that hold (issue 44 point 5): a gate that cannot fail is refused, an agent nobody can
reach stops the run as a judge outage does, and no test waits without a bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from summeval_runner import ConfigError, compare_runs, gate_comparison
from tests.app import summeval_compare
from tests.test_compare import baseline_scores, make_run


def _dropped_runs(tmp_path: Path) -> tuple[Path, Path]:
    base = baseline_scores()
    worse = {item: (s - 0.36, a, c - 0.36) for item, (s, a, c) in base.items()}
    return make_run(tmp_path / "base", "base", base), make_run(tmp_path / "new", "new", worse)


@pytest.mark.parametrize("threshold", ["nan", "inf", "-inf", "-0.1"])
def test_a_drop_threshold_no_drop_can_pass_is_bad_input(tmp_path: Path, threshold: str) -> None:
    # NaN compared False with every drop: a significant drop of 0.36 passed the gate, exit 0.
    base, new = _dropped_runs(tmp_path)
    out = tmp_path / "out"

    refused = summeval_compare(
        str(base), str(new), f"--fail-if-drop={threshold}", "--out", str(out), cwd=tmp_path
    )
    wrote_when_refused = out.exists()
    gated = summeval_compare(
        str(base), str(new), "--fail-if-drop", "0.1", "--out", str(out), cwd=tmp_path
    )

    assert refused.returncode == 2, refused.stderr
    assert "--fail-if-drop must be a finite number >= 0" in refused.stderr
    assert not wrote_when_refused
    assert gated.returncode == 1, gated.stderr
    assert "score" in gated.stderr


@pytest.mark.parametrize(
    ("rules", "said"),
    [
        ({"fail_if_drop": float("nan")}, "fail_if_drop must be a finite number >= 0, got nan"),
        ({"fail_if_drop": float("inf")}, "fail_if_drop must be a finite number >= 0, got inf"),
        (
            {"fail_if_below": {"score": float("nan")}},
            "fail_if_below['score'] must be a finite number >= 0, got nan",
        ),
        (
            {"fail_if_drop": 0.1, "max_error_rate": float("nan")},
            "max_error_rate must be between 0 and 1, got nan",
        ),
    ],
)
def test_the_library_gate_refuses_a_rule_that_cannot_fail(
    tmp_path: Path, rules: dict[str, object], said: str
) -> None:
    base, new = _dropped_runs(tmp_path)
    comparison = compare_runs([new], baseline=base)

    with pytest.raises(ConfigError) as raised:
        gate_comparison(comparison, **rules)  # type: ignore[arg-type]

    assert str(raised.value) == said
    assert not gate_comparison(comparison, fail_if_drop=0.1).passed
