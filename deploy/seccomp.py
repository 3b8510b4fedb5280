"""Write a tighter seccomp profile for the sandbox container than ``seccomp=unconfined``.

    python deploy/seccomp.py [--base PROFILE.json] OUT.json

The result is the container engine's own default profile (containers-common's
``/usr/share/containers/seccomp.json``, which podman and CRI-O use) with one change: ``sethostname``
is allowed without CAP_SYS_ADMIN, because bubblewrap names each sandbox's private UTS namespace
(``--hostname``) and the default profile only allows that call to CAP_SYS_ADMIN holders. Everything
else bubblewrap does (``unshare``/``clone`` with namespace flags, ``mount``, ``pivot_root``) the
containers-common default already allows. The profile is generated from the file on the machine
rather than shipped, so it follows the installed engine. Docker's built-in default is stricter
(user namespaces need CAP_SYS_ADMIN there) and has no file on disk: use ``seccomp=unconfined`` there,
as deploy/compose.yaml does.

With ``--security-opt seccomp=OUT.json --security-opt unmask=/proc/*`` the sandbox runs with no
capabilities, non-root, read-only root (tests/deploy/test_containers.py starts one this way).
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

DEFAULT_BASES = ("/etc/containers/seccomp.json", "/usr/share/containers/seccomp.json")
ALLOWED = ("sethostname",)


def sandbox_profile(base: dict) -> dict:
    """``base`` with every rule about ALLOWED removed and one unconditional allow added."""
    profile = copy.deepcopy(base)
    rules = []
    for rule in profile["syscalls"]:
        names = [n for n in rule["names"] if n not in ALLOWED]
        if names:
            rules.append({**rule, "names": names})
    rules.append({"names": list(ALLOWED), "action": "SCMP_ACT_ALLOW", "args": [], "comment":
                  "cohort sandbox: bubblewrap --hostname in its own UTS namespace", "includes": {}, "excludes": {}})
    profile["syscalls"] = rules
    return profile


def find_base() -> Path:
    for candidate in DEFAULT_BASES:
        if Path(candidate).is_file():
            return Path(candidate)
    raise SystemExit(f"no default seccomp profile found in {', '.join(DEFAULT_BASES)}; pass --base")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--base", type=Path, default=None, help="default profile to start from")
    args = parser.parse_args(argv)
    base = json.loads((args.base or find_base()).read_text())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(sandbox_profile(base), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
