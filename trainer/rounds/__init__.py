"""Where a training round comes from: one interface, two sources, and the parts of the asynchronous one.

The loop (``trainer.train``) reads a :class:`~cohort.trainer.rounds.source.RoundSource`: start, next round,
publish weights, metrics, state, close. :func:`~cohort.trainer.rounds.source.open_source` picks one of
two, in one place (``rounds.mode`` says which):

- :class:`~cohort.trainer.rounds.lockstep.LockStep` (``rollout.max_staleness = 0``): this process's engine
  generates each round after the update before it (``trainer.collect``);
- :class:`~cohort.trainer.rounds.pipeline.Pipeline` (k > 0): rollout worker processes generate ahead of the
  learner, at most k weight versions behind. It is assembled from parts that do not know each other
  (tests/test_import_layers.py keeps them apart): ``workers`` (spawn, join, watch, restart),
  ``publisher`` (the double-buffered weight broadcast), ``order_book`` (admission and rejection: pure, no
  threads), ``receiver`` (the thread that scores arrivals).

Shared by both: ``round`` (the round's types), ``messages`` (what the learner and a rollout worker send each
other: a rollout worker imports these, never the learner) and ``dynamic`` (dynamic sampling, written once).
This ``__init__`` imports nothing: importing a part never loads the others.
"""
