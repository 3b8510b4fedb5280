"""Run untrusted, model-written Python: bubblewrap slots with a fork server, and unforgeable tests.

- ``policy``: limits, seccomp filter, bwrap command line, and the threat model (read it first).
- ``executor``: one warm slot (bwrap sandbox whose PID 1 is ``_zygote.py``) and one execution.
- ``pool``: warm slot pools and the in-process :class:`Sandbox` facade (``execute``, ``run_tests``).
- ``grader``: tests in a separate sandbox from the candidate, plain data between them.
- ``cgroup``: per-slot memory+pids cgroup where the machine allows it.
- ``server``: ``grpo.sandbox.v1.SandboxService`` (``cohort serve sandbox``).

Heavy imports stay in the submodules; importing ``sandbox`` starts nothing.
"""
