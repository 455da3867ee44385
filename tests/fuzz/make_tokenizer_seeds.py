#!/usr/bin/env python3
"""Seeds for tokenizer_fuzzer (layout: text NUL tokenizer.json [NUL tokenizer_config.json]).

  make_tokenizer_seeds.py OUT_DIR FIXTURES_DIR CASES_JSON

- every tokenizer folder under FIXTURES_DIR with a tokenizer.json: a small copy (the full files
  are 250-350 kB, which the fuzzer mutates at a few runs per second) that keeps the
  file's structure (normaliser, pre-tokeniser, post-processor, added tokens, model options) and the
  first 300 vocabulary entries plus the merges among them, with the folder's tokenizer_config.json;
- every case of tests/unit/data/hf_tokenizer_cases.json (one tokenizer.json feature each, generated
  with the real `tokenizers`), each with its first input as the text.
Standard library only.
"""
import json
import os
import sys

KEEP_VOCAB = 300
TEXTS = ["a cat holding a sign", "Ünïcödé 😀 <|endoftext|>  x   y", "tab\there\nnew line [INST]"]


def dump(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def write_seed(out_dir, name, text, tokenizer, config):
    data = text.encode("utf-8") + b"\0" + dump(tokenizer)
    if config is not None:
        data += b"\0" + dump(config)
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(data)


def shrink(tokenizer):
    model = tokenizer.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...] (refused by the reader, kept short)
        return dict(tokenizer, model=dict(model, vocab=vocab[:KEEP_VOCAB]))
    if not isinstance(vocab, dict):
        return tokenizer
    keep = {t: i for t, i in vocab.items() if isinstance(i, int) and i < KEEP_VOCAB}
    for token in ("unk_token",):
        if isinstance(model.get(token), str) and model[token] in vocab:
            keep[model[token]] = vocab[model[token]]
    prefix = model.get("continuing_subword_prefix") or ""
    merges = []
    for m in model.get("merges") or []:
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        merged = left + (right[len(prefix):] if right.startswith(prefix) else right)
        if left in keep and right in keep and merged in keep:
            merges.append(m)
    model = dict(model, vocab=keep, merges=merges)
    return dict(tokenizer, model=model)


def main():
    out_dir, fixtures, cases_path = sys.argv[1:4]
    n = 0
    for root, _, files in sorted(os.walk(fixtures)):
        if "tokenizer.json" not in files:
            continue
        with open(os.path.join(root, "tokenizer.json"), encoding="utf-8") as f:
            tokenizer = json.load(f)
        config = None
        if "tokenizer_config.json" in files:
            with open(os.path.join(root, "tokenizer_config.json"), encoding="utf-8") as f:
                config = json.load(f)
        small = shrink(tokenizer)
        for k, text in enumerate(TEXTS):
            n += 1
            write_seed(out_dir, f"fixture_{n}_{k}", text, small, config)
    if os.path.exists(cases_path):
        with open(cases_path, encoding="utf-8") as f:
            cases = json.load(f)
        vocabs = cases["vocabs"]
        for case in cases["cases"]:
            tokenizer = json.loads(json.dumps(case["tokenizer"]))
            vocab = tokenizer.get("model", {}).get("vocab")
            if isinstance(vocab, str) and vocab.startswith("@"):
                tokenizer["model"]["vocab"] = vocabs[int(vocab[1:])]
            inputs = case.get("inputs") or [""]
            write_seed(out_dir, f"case_{case['name']}", inputs[0], tokenizer,
                       case.get("tokenizer_config"))
            n += 1
    print(n)


if __name__ == "__main__":
    main()
