"""Every front (`cohort serve front nemo-gym|ors|openenv`) stops on Ctrl-C and SIGTERM with exit 0, also when started
as a shell's background job (SIGINT ignored from birth: the front must set its own handler)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

pytest.importorskip("openreward.environments")
pytest.importorskip("openenv")


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("kind", ["nemo-gym", "ors", "openenv"])
def test_ctrl_c_and_sigterm_stop_it_even_as_a_background_job(math_server, tmp_path, kind, sig, deadline, serving):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "q", "prompt": "What is 2+2?", "answer": "4"}) + "\n")
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "cohort.cli", "serve", "front", kind, "--verifier", "math",
                             "--endpoint", math_server.endpoint, "--port", "0", "--port-file", str(port_file),
                             *(["--rows", str(rows)] if kind == "ors" else [])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        serving(proc, port_file, f"the {kind} front", deadline(120))  # its port written and /health answering
        proc.send_signal(getattr(signal, sig))
        assert proc.wait(timeout=deadline(30)) == 0, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
