"""Run under torchrun by ``test_pipeline.py``: ``torchrun --nproc_per_node 2 pipeline_learners.py OUT OVERRIDES...``.

``cohort train``'s own entry (``trainer.train.run``) on every rank, with each rank's :class:`Pipeline` kept so
that the prompts it consumed can be written to ``OUT/consumed_<rank>.json`` for the test to account for.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from cohort.trainer import train
from cohort.trainer.config import load_config
from cohort.trainer.rounds.pipeline import Pipeline

kept: list[Pipeline] = []
init = Pipeline.__init__


def keep(self, *args, **kwargs):
    init(self, *args, **kwargs)
    kept.append(self)


if __name__ == "__main__":
    out, overrides = Path(sys.argv[1]), sys.argv[2:]
    Pipeline.__init__ = keep
    records = train.run(load_config(None, [f"run.output_dir={out}", *overrides]))
    (pipe,) = kept
    (out / f"consumed_{os.environ['RANK']}.json").write_text(json.dumps({"consumed": pipe.consumed, "p": pipe.p,
                                                                         "steps": len(records)}))
