"""Other ecosystems' rewards behind Cohort's contract (docs/interop.md).

- :mod:`.reasoning_gym`: reasoning-gym's procedural tasks as task rows, its ``score_answer`` as the
  ``reasoning_gym`` verifier (in process);
- :mod:`.remote`: a NeMo-Gym resource server's ``/verify`` (``nemo_gym``) and an Open Reward Standard
  server (``ors``) called over HTTP, their failures mapped to masked statuses, never a reward of 0.

``cohort.integrations.nemo_gym`` is the other direction (a Cohort verifier behind NeMo-Gym's ``/verify``).
Each is a plain :class:`cohort.verifiers.base.Verifier` registered under ``cohort.verifiers``; the
foreign libraries load only when the verifier is served (extra ``interop``).
"""
