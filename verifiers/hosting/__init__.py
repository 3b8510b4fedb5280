"""Hosting verifiers: what serves them over gRPC, as opposed to the verifiers themselves.

- :mod:`.server`: the ``VerifierService`` servicer (converts messages, nothing else) and ``serve``;
- :mod:`.host`: :class:`~.host.VerifierHost`, transport-free validation, the bounded queue and scoring;
- :mod:`.procs`: the scoring processes behind the host (``--scoring-procs``) for GIL-bound verifiers;
- :mod:`.workers`: the killable worker-process pool (the scoring processes; also the math verifier's
  SymPy checks, the local LLM judge and reasoning-gym's scorers);
- :mod:`.metrics`: the server's Prometheus metrics.

The trainer never imports this package (tests/test_import_layers.py). This ``__init__`` imports nothing, so
a verifier that uses :mod:`.workers` does not load the server.
"""
