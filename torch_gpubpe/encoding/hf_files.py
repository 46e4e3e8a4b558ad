"""The files of a Hugging Face model folder besides its vocabulary: whether a JSON file is a
``tokenizer.json``, and the settings ``transformers`` reads from the ``tokenizer_config.json`` and
``chat_template.jinja`` beside it (its context length, padding side, chat template).
"""

from __future__ import annotations

import json
import os


def is_hf_tokenizer_json(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` is a Hugging Face ``tokenizer.json`` by its content (a
    JSON object with a ``"model"`` object), whatever its name."""
    if not str(path).endswith(".json"):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and isinstance(obj.get("model"), dict)


CONFIG_KEYS = ("model_max_length", "padding_side", "truncation_side", "chat_template",
               "bos_token", "eos_token", "unk_token", "pad_token", "clean_up_tokenization_spaces")


def hf_config_beside(tokenizer_json: str | os.PathLike | None) -> dict:
    """The settings of the ``tokenizer_config.json`` (and ``chat_template.jinja``) beside a
    model's ``tokenizer.json`` that ``transformers`` applies on loading (:data:`CONFIG_KEYS`;
    special tokens as their spelling), or ``{}``: none there, or a file not named
    ``tokenizer.json`` (whose folder may hold another model's)."""
    if tokenizer_json is None or os.path.basename(tokenizer_json) != "tokenizer.json":
        return {}
    folder = os.path.dirname(os.path.abspath(tokenizer_json))
    out: dict = {}
    try:
        with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        cfg = {}
    for key in CONFIG_KEYS if isinstance(cfg, dict) else ():
        v = cfg.get(key)
        if isinstance(v, dict):   # (an AddedToken written out)
            v = v.get("content")
        if v is not None:
            out[key] = v
    try:
        with open(os.path.join(folder, "chat_template.jinja"), encoding="utf-8") as f:
            out["chat_template"] = f.read()
    except OSError:
        pass
    return out
