"""Every reasoning-gym task through the `reasoning_gym` verifier: can it be written as rows, does its own gold score 1?

`python tests/interop/survey_reasoning_gym.py` (about 20 s): for each task, at its default config and at
curriculum level 1, writes 3 rows (`rows()`), then scores `<answer>GOLD</answer>` and a garbage answer through
the verifier in process. Prints one line per outcome with its count, then the tasks that are not gold=1.
"""

from __future__ import annotations

import collections
import signal

from reasoning_gym.factory import CURRICULA, DATASETS

from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, VerifyContext
from cohort.verifiers.interop import reasoning_gym as rgv


def _alarm(*_):
    raise TimeoutError("over 30 s")


def main() -> None:
    signal.signal(signal.SIGALRM, _alarm)
    verifier = rgv.ReasoningGymVerifier()
    counts: collections.Counter = collections.Counter()
    notes = {}
    for name in sorted(DATASETS):
        for level in (None, 1):
            if level is not None and name not in CURRICULA:
                continue
            where = "default config" if level is None else "curriculum level 1"
            try:
                signal.alarm(30)
                scored = []
                for row in rgv.rows(name, 3, seed=0, difficulty=level):
                    g = GroupRequest("reasoning_gym", (Rollout(0, f"<answer>{row['answer']}</answer>"),
                                                       Rollout(1, "<answer>zzz</answer>")),
                                     Reference(answer=row["answer"]), options=row["verifiers"][0]["options"])
                    scored.append(verifier.verify_group(g, VerifyContext()))
                signal.alarm(0)
            except Exception as exc:  # noqa: BLE001  (a survey: every failure is a line)
                signal.alarm(0)
                counts[(where, "no rows")] += 1
                notes[f"{name} ({where})"] = repr(exc)[:160]
                continue
            gold_one = all(a.status is RolloutStatus.OK and a.reward == 1.0 for a, _ in scored)
            garbage_ok = all(b.status is RolloutStatus.OK for _, b in scored)
            counts[(where, "rows", "gold scores 1" if gold_one else "gold scores < 1",
                    "garbage OK" if garbage_ok else "garbage MASKED")] += 1
            if not gold_one or not garbage_ok:
                notes[f"{name} ({where})"] = [(a.reward, b.status.name, b.reward) for a, b in scored]
    for key, n in sorted(counts.items()):
        print(f"{n:4d}  {' / '.join(key)}")
    for key, note in notes.items():
        print(f"  {key}: {note}")


if __name__ == "__main__":
    main()
