#!/usr/bin/env python3
"""The layer check: every #include "folder/..." of ours points down the layer graph of HACKING.md.

A source file in folder F may include our headers only from the folders F may depend on (below);
inside models/ the same holds between its sub-folders. Third-party headers (absl/, grpcpp/, torch/,
nlohmann/, ...) are not ours and not checked. Generated protobuf headers (ditserve/...) count as
proto/. tools/, bench/ and tests/ sit on top and may include anything.

Usage: check_layers.py [SOURCE_ROOT]   (exit 0: no upward include; 1: each violation printed)
"""
import os
import re
import sys

# Folder -> the folders of ours it may include (itself implied).
LAYERS = {
    "common": set(),
    "proto": set(),
    "sharding": {"common"},
    "comm": {"common"},
    "metrics": {"common"},
    "imaging": {"common"},
    "models": {"common", "sharding", "comm"},
    "pipeline": {"common", "sharding", "comm", "models", "imaging"},
    "worker": {"common", "sharding", "comm", "models", "imaging", "pipeline", "metrics", "proto"},
    # The frontend is torch-free: of models/ it may use only LoRA's torch-free file rules (below).
    "server": {"common", "proto", "metrics", "imaging"},
    "cli": {"common", "proto", "sharding", "imaging"},
}
TOP = {"tools", "bench", "tests"}
# Single headers a layer may use from a folder it otherwise may not (torch-free pieces).
EXCEPTIONS = {
    "server": {"models/lora/lora_choice.h", "models/lora/lora_files.h", "models/lora/lora_format.h"},
}
# Inside models/: sub-folder -> the sub-folders it may include. "." is models/ itself
# (transformer.h, the interface every family implements, and transformer_factory, which knows them all).
MODEL_LAYERS = {
    "cuda": set(),
    "common": {"cuda"},
    "tp": {"common", "cuda"},
    "lora": {"common", "tp"},
    "tokenizers": set(),
    "vae": {"common"},
    "text": {"common", "tp", "tokenizers"},
    "flux1": {"common", "tp", "lora", "."},
    "flux2": {"common", "tp", "lora", "."},
    "qwenimage": {"common", "tp", "lora", "."},
}
# What families may include from models/ itself: the interface and its shared implementation base.
MODEL_FILES_OF_DOT = {"models/transformer.h", "models/transformer_base.h",
                      "models/flux_family_transformer.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SUFFIXES = (".h", ".cc", ".cu", ".cuh")


def folder_of(include):
    head = include.split("/", 1)[0]
    return "proto" if head == "ditserve" else head


def check_file(root, rel):
    errors = []
    parts = rel.split("/")
    layer = parts[0]
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            target = folder_of(inc)
            if target not in LAYERS and target not in TOP:
                continue  # third-party, or a same-folder relative include
            if target == layer:
                if layer == "models":
                    err = check_models(parts, inc)
                    if err:
                        errors.append(f"{rel}:{lineno}: {err}")
                continue
            if target in TOP or target not in LAYERS[layer]:
                if inc in EXCEPTIONS.get(layer, set()):
                    continue
                errors.append(f"{rel}:{lineno}: {layer}/ may not include {inc} "
                              f"({layer}/ depends on: {', '.join(sorted(LAYERS[layer])) or 'nothing of ours'})")
    return errors


def check_models(parts, inc):
    sub = parts[1] if len(parts) > 2 else "."
    inc_parts = inc.split("/")
    target = inc_parts[1] if len(inc_parts) > 2 else "."
    if sub == "." or target == sub:
        return None  # models/ itself (the factory) sits on top of its sub-folders
    allowed = MODEL_LAYERS.get(sub)
    if allowed is None:
        return f"models/{sub}/ is not in scripts/check_layers.py's MODEL_LAYERS: add it"
    if target == "." and "." in allowed and inc in MODEL_FILES_OF_DOT:
        return None
    if target in allowed and target != ".":
        return None
    return f"models/{sub}/ may not include {inc} (it depends on: {', '.join(sorted(allowed)) or 'nothing'})"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    errors = []
    checked = 0
    for layer in sorted(LAYERS):
        top = os.path.join(root, layer)
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    rel = os.path.relpath(os.path.join(dirpath, name), root)
                    if "/gen/" in rel:
                        continue
                    checked += 1
                    errors.extend(check_file(root, rel))
    for e in errors:
        print(e)
    print(f"check_layers: {checked} files, {len(errors)} upward includes")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
