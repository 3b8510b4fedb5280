# Writes train.jsonl / test.jsonl here (run from the repository root): every pair a, b in 0..20, shuffled with seed 0;
# the first 64 are the held-out test rows, the rest the train rows.
import json, random
pairs = [(a, b) for a in range(0, 21) for b in range(0, 21)]
rng = random.Random(0); rng.shuffle(pairs)
test, train = pairs[:64], pairs[64:]
for name, rows in (("train", train), ("test", test)):
    with open(f"examples/data/add-mini/{name}.jsonl", "w") as f:
        for i, (a, b) in enumerate(rows):
            f.write(json.dumps({"id": f"add-{name}/{i}", "prompt": f"What is the sum of {a} and {b}?", "answer": str(a + b)}) + "\n")
