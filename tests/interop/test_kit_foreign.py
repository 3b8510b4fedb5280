"""The conformance kit as the validator of other standards' servers: `cohort conformance`, through each adapter,
against a deliberately broken server of each standard (`COHORT_TEST_BROKEN=1`: its failures scored 0.0 as if
measured, a wrong answer given a random reward). The kit must fail it, naming the rule, the case and what
was wrong, and exit 1. The same servers, not broken, pass every rule (test_remote.py, test_openenv.py).

- NeMo-Gym: `nemo_gym_standin.py` (NeMo-Gym's schema; NeMo-Gym itself needs Python >= 3.12);
- ORS: `ors_env.py` in the `openreward` SDK's own `Server`;
- OpenEnv: `openenv_env.py` in OpenEnv's own `create_app`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("httpx")
pytest.importorskip("openreward.environments")
pytest.importorskip("openenv.core.env_server")

HERE = Path(__file__).resolve().parent

STANDARDS = {  # verifier -> (server script, health probe, the URL's variable, the adapter's other settings)
    "nemo_gym": ("nemo_gym_standin.py", "/docs", "COHORT_NEMO_GYM_URL", {}),
    "ors": ("ors_env.py", "/health", "COHORT_ORS_URL", {"COHORT_ORS_ENV": "arithmetic"}),
    "openenv": ("openenv_env.py", "/health", "COHORT_OPENENV_URL", {}),
}
# what each broken server must be caught at: a failure of theirs scored 0.0 where the case expects a mask
CAUGHT = {
    "nemo_gym": "case 'masked-by-them' rollout 0: status ROLLOUT_STATUS_OK, expected ROLLOUT_STATUS_DEPENDENCY_UNAVAILABLE",
    "ors": "case 'environment-raises' rollout 0: status ROLLOUT_STATUS_OK, expected ROLLOUT_STATUS_VERIFIER_ERROR",
    "openenv": "case 'environment-fails' rollout 0: status ROLLOUT_STATUS_OK, expected ROLLOUT_STATUS_VERIFIER_ERROR",
}


@pytest.mark.parametrize("verifier", sorted(STANDARDS))
def test_the_kit_catches_a_broken_foreign_server_through_its_adapter(verifier, tmp_path, foreign_server):
    script, probe, url_var, extra = STANDARDS[verifier]
    broken = foreign_server(script, tmp_path, probe, env={"COHORT_TEST_BROKEN": "1"}).start()
    try:
        env = {**os.environ, url_var: broken.url, **extra, "PYTHONSAFEPATH": "1", "COLUMNS": "400"}
        out = subprocess.run([sys.executable, "-m", "cohort.cli", "conformance", "127.0.0.1:0", "--verifier", verifier,
                              "--cases", str(HERE / "cases" / f"{verifier}.jsonl"),
                              "--server-cmd", f"{sys.executable} -m cohort.cli serve {verifier} --port {{port}}",
                              "--rule", "known_answers", "--rule", "determinism", "--rule", "health"],
                             env=env, capture_output=True, text=True, timeout=300)
    finally:
        broken.kill()
    report = " ".join(out.stdout.replace("│", " ").split())  # the table wraps long details over rows
    assert out.returncode == 1, out.stdout + out.stderr
    assert "NOT CONFORMANT: 1 passed, 2 failed, 0 skipped (failed: known_answers, determinism)" in report, out.stdout
    assert CAUGHT[verifier] in report, out.stdout  # a failure of theirs passed off as a reward of 0
    assert "determinism FAIL" in report and "serially" in report  # the random reward
    assert "Traceback" not in out.stderr
