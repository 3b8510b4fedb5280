# Copy of shared/bench/trl_workload/make_workload.py (the shared TRL workload, made by this project):
# tests/integrations/test_trl.py builds the workload with it when that folder is not beside the checkout.
#!/usr/bin/env python
"""Build the fully offline tiny GRPO workload (tokenizer, model checkpoint, dataset).

Everything is deterministic: re-running this script reproduces byte-identical
tokenizer.json / dataset JSONL and a model.safetensors with identical tensors
(same torch version + same seed).

Outputs (under --out, default: the folder of this script):
  tokenizer/          PreTrainedTokenizerFast (character level, 19 tokens)
  model/              LlamaForCausalLM, random init (seed 0), safetensors, + tokenizer copy
  data/train.jsonl    256 prompts {"prompt": "12+35=", "answer": 47}
  workload_manifest.json   sha256 of every file + key facts
"""
import argparse
import hashlib
import json
import os
import random

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0, 1, 2, 3
CHARS = list("0123456789+-*= ")  # ids 4..18  ("*" and "-" are unused by the dataset but kept in the vocab)
SEED = 0
N_PROMPTS = 256


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    # BPE with no merges == pure character-level model: every character is one token,
    # unknown characters map to <unk>. No pre-tokenizer, no normalizer, no post-processor
    # (=> NO BOS/EOS is added when encoding). Fuse decoder => decode() concatenates chars
    # without inserting spaces.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIALS)  # keeps ids 0..3, marks them special
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="left",
        truncation_side="left",
        model_max_length=64,
        clean_up_tokenization_spaces=False,
    )
    return hf


def build_model(tok: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=len(tok),  # 19
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,  # plain MHA, head_dim 32
        hidden_act="silu",
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        initializer_range=0.02,
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        tie_word_embeddings=False,
        use_cache=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(cfg)  # random init: normal(0, 0.02) linears/embeddings, ones for RMSNorm
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return model.float().eval()


def build_dataset():
    rng = random.Random(SEED)
    rows = []
    for _ in range(N_PROMPTS):
        a = rng.randint(10, 99)
        b = rng.randint(10, 99)
        rows.append({"prompt": f"{a}+{b}=", "answer": a + b})
    return rows


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    out = args.out
    tok_dir, model_dir, data_dir = (os.path.join(out, d) for d in ("tokenizer", "model", "data"))
    for d in (tok_dir, model_dir, data_dir):
        os.makedirs(d, exist_ok=True)

    tok = build_tokenizer()
    tok.save_pretrained(tok_dir)

    model = build_model(tok)
    model.save_pretrained(model_dir, safe_serialization=True)
    tok.save_pretrained(model_dir)  # self-contained checkpoint: AutoTokenizer/AutoProcessor work on model/

    rows = build_dataset()
    with open(os.path.join(data_dir, "train.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")

    # sanity checks
    enc = tok("12+35=")["input_ids"]
    assert enc == [5, 6, 14, 7, 9, 17], enc
    assert tok.decode([5, 6, 1, 0], skip_special_tokens=True) == "12", tok.decode([5, 6, 1, 0])
    n_params = sum(p.numel() for p in model.parameters())

    manifest = {
        "seed": SEED,
        "torch": torch.__version__,
        "vocab": tok.convert_ids_to_tokens(list(range(len(tok)))),
        "special_ids": {"pad": tok.pad_token_id, "eos": tok.eos_token_id, "bos": tok.bos_token_id, "unk": tok.unk_token_id},
        "n_params": n_params,
        "n_prompts": len(rows),
        "prompt_token_len": sorted({len(tok(r["prompt"])["input_ids"]) for r in rows}),
        "files": {},
    }
    for root in (tok_dir, model_dir, data_dir):
        for name in sorted(os.listdir(root)):
            p = os.path.join(root, name)
            manifest["files"][os.path.relpath(p, out)] = sha256(p)
    with open(os.path.join(out, "workload_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps({k: v for k, v in manifest.items() if k != "files"}, indent=1))
    print("model.safetensors sha256:", manifest["files"]["model/model.safetensors"])


if __name__ == "__main__":
    main()
