#!/usr/bin/env python3
"""Relative error ||ours - ref|| / ||ref|| between two float32 tensors of safetensors files (the
standard library only: no torch, no numpy; the tensors compared are the tiny fixtures' outputs and
images): relative_error.py OURS.safetensors NAME REF.safetensors REF_NAME [--limit L]
[--label TEXT]. Prints one line; exits 1 when the error is not below the limit."""
import argparse
import array
import json
import math
import struct
import sys


def read(path, name):
    """(shape, float32 values) of tensor `name`."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        meta = header[name]
        if meta["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {meta['dtype']}, expected F32")
        begin, end = meta["data_offsets"]
        f.seek(8 + n + begin)
        values = array.array("f")
        values.frombytes(f.read(end - begin))
        if sys.byteorder != "little":
            values.byteswap()
        return tuple(meta["shape"]), values


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ours")
    p.add_argument("name")
    p.add_argument("ref")
    p.add_argument("ref_name")
    p.add_argument("--limit", type=float, default=None)
    p.add_argument("--label", default="")
    a = p.parse_args()
    (ours_shape, ours), (ref_shape, ref) = read(a.ours, a.name), read(a.ref, a.ref_name)
    if ours_shape != ref_shape:
        sys.exit(f"shape {ours_shape} != {ref_shape}")
    diff = math.sqrt(math.fsum((x - y) * (x - y) for x, y in zip(ours, ref)))
    err = diff / math.sqrt(math.fsum(y * y for y in ref))
    verdict = "" if a.limit is None else (" PASS" if err < a.limit else " FAIL") + f" (limit {a.limit:g})"
    print(f"{a.label or a.ref_name}: relative error {err:.3e}{verdict}")
    sys.exit(0 if a.limit is None or err < a.limit else 1)


if __name__ == "__main__":
    main()
