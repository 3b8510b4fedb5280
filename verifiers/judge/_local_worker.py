"""The local judge's worker process: a transformers causal LM answering "which verdict word comes next?".

Runs in a :class:`~verifiers.hosting.workers.WorkerPool` process, so the verifier server itself never imports
torch, a judge call past its deadline is killed with its process, and a killed worker is noticed and
replaced (the group it was judging is masked, never scored 0).

A task is a tuple of items, each ``(messages, assistant_prefix, choices, continuation)``; the reply,
per item, is ``(p, top, mass)``, where ``top`` is the most likely next token after the prefix (shown in
``detail``), ``mass`` the probability the two choices hold together (1.0 for a continuation) and ``p`` is

- with ``choices`` (two words): the probability of ``choices[0]`` among the two at the first answer
  position (the next-token distribution after the assistant turn opens with ``assistant_prefix``: read,
  never sampled, so temperature 0 in effect). Each word counts with its usual spellings ("Yes", " Yes",
  "yes", " yes", "YES"), summed;
- with a ``continuation``: the mean per-token probability of that text right after the prefix (how
  surely the judge would say it: the reference-probability reward of RLPR, Yu et al. 2025).

The group's prompts go through the model as padded batches (left padding, attention mask); batching
changes float sums in the last bits, so the verifier rounds probabilities to 4 decimals.
"""

from __future__ import annotations

from collections.abc import Sequence

MICRO_BATCH = 8
"""Prompts per forward pass (bounds the worker's memory for big groups or pairwise mode)."""
BATCH_TOKENS = 8192
"""Padded tokens per forward pass (rows x the longest row): with the prompts sorted by length, a long row
is padded with rows of its own length, so it never sets the cost of the short ones."""


def by_length(lengths: Sequence[int], rows: int = MICRO_BATCH, tokens: int = BATCH_TOKENS) -> list[list[int]]:
    """Indexes of ``lengths`` in forward passes: sorted by length, at most ``rows`` a pass and at most
    ``tokens`` padded tokens (a row longer than ``tokens`` alone).

    >>> by_length([5, 900, 6, 7], rows=2, tokens=1000)
    [[0, 2], [3], [1]]
    """
    order = sorted(range(len(lengths)), key=lambda k: lengths[k])
    batches: list[list[int]] = []
    for k in order:
        last = batches[-1] if batches else None
        if last is not None and len(last) < rows and lengths[k] * (len(last) + 1) <= tokens:
            last.append(k)
        else:
            batches.append([k])
    return batches


def setup(folder: str, threads: int, device: str = "cpu"):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cohort.verifiers.base import encode_chat, encode_text

    torch.set_num_threads(max(1, threads))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device)
    model.eval()
    choice_ids: dict[str, list[int]] = {}

    def ids_of(word: str) -> list[int]:
        if word not in choice_ids:
            found = []
            for variant in (word, " " + word, word.lower(), " " + word.lower(), word.upper()):
                ids = tokenizer.encode(variant, add_special_tokens=False)
                if ids and ids[0] not in found:
                    found.append(ids[0])
            choice_ids[word] = found
        return choice_ids[word]

    def encode(item) -> tuple[list[int], int]:
        # the template's own tokens around contents encoded as text: a completion holding
        # "<|im_start|>system" stays those characters, it cannot open a turn (encode_chat)
        messages, prefix, _, continuation = item
        ids = encode_chat(tokenizer, messages) + encode_text(tokenizer, prefix)
        tail = encode_text(tokenizer, " " + continuation) if continuation else []
        return ids + tail, len(tail)

    def handle(task: Sequence[tuple]) -> list[tuple[float, str, float]]:
        out: list[tuple[float, str, float] | None] = [None] * len(task)
        encoded = [encode(item) for item in task]
        for batch in by_length([len(ids) for ids, _ in encoded]):
            width = max(len(encoded[k][0]) for k in batch)
            pad = tokenizer.pad_token_id
            input_ids = torch.tensor([[pad] * (width - len(encoded[k][0])) + encoded[k][0] for k in batch])  # (n, L), left-padded
            mask = torch.tensor([[0] * (width - len(encoded[k][0])) + [1] * len(encoded[k][0]) for k in batch])  # (n, L)
            with torch.inference_mode():
                logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
                logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
            for row, k in enumerate(batch):
                ids, n_tail = encoded[k]
                first = width - n_tail - 1  # the position predicting the first answer token
                top = tokenizer.decode([int(logprobs[row, first].argmax())])
                choices = task[k][2]
                if n_tail:  # mean probability of the continuation's tokens (a bare leading space not counted)
                    targets = input_ids[row, width - n_tail :]  # (n_tail,)
                    token_p = logprobs[row, first : width - 1].gather(1, targets[:, None]).exp()[:, 0]  # (n_tail,)
                    counted = [j for j, t in enumerate(ids[-n_tail:]) if tokenizer.decode([t]).strip()] or list(range(n_tail))
                    p, mass = float(token_p[counted].mean()), 1.0
                else:
                    each = [float(logprobs[row, first, ids_of(c)].exp().sum()) for c in choices]
                    mass = sum(each)
                    p = each[0] / mass if mass > 0 else 0.5
                out[k] = (p, top, mass)
        return out  # type: ignore[return-value]

    # one forward pass before the worker says it is ready (torch's first call is slow): the server turns
    # SERVING after the judge is constructed, so SERVING means a call is answered at full speed
    handle((([{"role": "user", "content": "Is 2 + 2 = 4?"}], "", ("Yes", "No"), None),))
    return handle
