"""Policy, reference model and tokenizer: loaded from a checkpoint or built locally (never downloaded).

The local build is a character-level tokenizer (``tokenizers`` BPE with no merges: one token per
character, no BOS/EOS added on encode) and a randomly initialised ``LlamaForCausalLM``.

Named models (``model.name``, :data:`NAMED_MODELS`) ship inside Python packages as GGUF files; the first
use converts one to a plain transformers folder in the cache (``COHORT_CACHE_DIR``, default
``~/.cache/cohort``), see :mod:`cohort.trainer.gguf_models`.
"""

from __future__ import annotations

import contextlib
import copy

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from cohort.trainer import distributed
from cohort.trainer.config import LoraSpec, ModelSection, TinyModel
from cohort.trainer.precision import resolve

SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")  # ids 0..3
CHARS = "0123456789+-*= "


def char_tokenizer(chars: str = CHARS) -> PreTrainedTokenizerBase:
    """A char-level fast tokenizer: pad 0, eos 1, bos 2 (never added), unk 3, then one id per char."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(list(SPECIALS) + list(chars))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(
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


def tiny_llama(spec: TinyModel, tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_attention_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    devnull_state = torch.random.get_rng_state()
    torch.manual_seed(spec.init_seed)
    model = LlamaForCausalLM(cfg)
    torch.random.set_rng_state(devnull_state)  # the init seed never leaks into the run's RNG stream
    return model.float()


def build_policy(cfg: ModelSection, for_engine: bool = False) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """The trainable policy and its tokenizer, its parameters in the master dtype (``trainer.precision``); with
    ``for_engine`` (a rollout worker's copy, which only generates) in the compute dtype. With ``model.lora`` the
    model is peft's, only its adapters trainable."""
    device = distributed.local_device(cfg.device)
    precision = resolve(cfg.dtype, device)
    dtype = precision.compute if for_engine else precision.master
    tokenizer, path = build_tokenizer(cfg)
    model = tiny_llama(cfg.tiny, tokenizer) if path is None else AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model.to(device=device, dtype=dtype)
    model.config.use_cache = True
    if cfg.lora is not None:
        model = with_lora(model, cfg.lora)
    return model, tokenizer


def build_tokenizer(cfg: ModelSection) -> tuple[PreTrainedTokenizerBase, str | None]:
    """The policy's tokenizer and the model's folder (None for the embedded tiny model), without the model (a
    ``vllm-server`` rollout worker relays weights and holds none)."""
    if cfg.tiny is not None:
        tokenizer, path = char_tokenizer(), None
    else:
        path = cfg.path
        if cfg.name is not None:
            from cohort.trainer.gguf_models import named_model_folder

            path = str(named_model_folder(cfg.name))
        tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer_path or path)
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; set one in its tokenizer_config.json")
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos token")
    return tokenizer, path


def with_lora(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """peft's LoRA around ``model``: the base frozen, adapters (in the base's dtype) the only trainable parameters.
    Adapter weights start from peft's own seeded-by-torch initialisation, drawn from a fixed seed so that the
    learner and every rollout worker build the same adapters."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                        target_modules=spec.target_modules, modules_to_save=spec.modules_to_save or None,
                        bias="none", task_type="CAUSAL_LM")
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        return get_peft_model(model, config)
    finally:
        torch.random.set_rng_state(state)  # the adapters' seed never leaks into the run's RNG stream


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def adapters_off(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """The base model of a LoRA policy (its adapters switched off for the duration); any other model as it is."""
    return model.disable_adapter() if is_lora(model) else contextlib.nullcontext()


def trained_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the optimizer steps, in ``parameters()`` order: all of them, or a LoRA policy's adapters.
    What checkpoints hold and what weight pushes carry."""
    return [p for p in model.parameters() if p.requires_grad]


END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")


def stop_token_ids(tokenizer: PreTrainedTokenizerBase, model: torch.nn.Module | None = None) -> list[int]:
    """Token ids that end a completion: EOS, the generation config's EOS ids, and the chat end-of-turn
    tokens the tokenizer knows as special tokens (``<|im_end|>``, ``<|eot_id|>``, ...)."""
    ids = {int(tokenizer.eos_token_id)}
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    ids.update([eos] if isinstance(eos, int) else list(eos or []))
    specials = set(tokenizer.all_special_tokens) | set(getattr(tokenizer, "added_tokens_encoder", {}))
    for tok in END_OF_TURN_TOKENS:
        if tok in specials:
            ids.add(int(tokenizer.convert_tokens_to_ids(tok)))
    return sorted(ids)


def frozen_reference(policy: torch.nn.Module, cfg: ModelSection) -> torch.nn.Module:
    """A frozen copy of the policy as it is now (call before the first update), in the compute dtype (a reference
    is only ever forwarded: bf16 under ``model.dtype: bfloat16``). A LoRA policy is its own reference: its log-probs are taken with the
    adapters switched off (:func:`adapters_off`), so the base is held once."""
    if is_lora(policy):
        return policy
    ref = copy.deepcopy(policy).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref.to(resolve(cfg.dtype, next(ref.parameters()).device).compute)
