"""Writes hf_tokenizer_cases.json: small tokenizer.json files built here and the ids that the real
`tokenizers` library (and, for the tokenizer_config.json cases, transformers) gives for a few
inputs each. tokenizer_hf_cases_test.cc checks HfTokenizer against them.

Usage (a machine with tokenizers and transformers, e.g. the GPU host): python3
make_hf_tokenizer_cases.py OUT.json. Deterministic; versions are recorded in the output.

Most cases use an "observable" vocabulary: the 256 byte-level characters, then every substring of
the byte-level form of every (normalised) input, with ignore_merges, so each pre-tokenised word
comes out as one id and the ids show exactly where the text was split.
"""
import json
import sys
import tempfile
from pathlib import Path


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def bl(text):
    return "".join(B2U[b] for b in text.encode("utf-8"))


def byte_vocab():
    return {B2U[b]: b for b in range(256)}


def observable_vocab(strings, extra=(), longest=16, exclude=()):
    vocab = byte_vocab()
    subs = set()
    for s in strings:
        for form in (bl(s), bl(" " + s)):
            for i in range(len(form)):
                for j in range(i + 1, min(len(form), i + longest) + 1):
                    subs.add(form[i:j])
    for t in list(extra) + sorted(subs):
        if t not in vocab and t not in exclude:
            vocab[t] = len(vocab)
    return vocab


def bpe(vocab, merges=(), **opts):
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": False, "vocab": vocab, "merges": [list(m) for m in merges]}
    model.update(opts)
    return model


def byte_level(add_prefix_space=False, use_regex=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True,
            "use_regex": use_regex}


def split(pattern, behavior="Isolated", invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern},
            "behavior": behavior, "invert": invert}


def seq(*pre):
    return {"type": "Sequence", "pretokenizers": list(pre)}


def added(i, content, special=False, normalized=None, lstrip=False, rstrip=False, single_word=False):
    return {"id": i, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": (not special) if normalized is None else normalized,
            "special": special}


def tokenizer_json(model, normalizer=None, pre=None, post=None, added_tokens=()):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added_tokens),
            "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post,
            "decoder": None, "model": model}


MISTRAL = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+")

REGEX_INPUTS = [
    "Hello, World! it's", "IT'S DON'T we'LL", "x\u0085y\u180ez\u2028w\u00a0v\u3000u",
    "tab\t\tend \r\n\r\nnext", "  lead and trail  ", "\u0661\u0662\u0663 1234567 \u00bd \u216b",
    "e\u0301t\u00e9 a\u203fb snake_case", "\U0001F469\u200d\U0001F469 \U0001F363!!",
    "dead beef 0x1F zz", "line1\nline2\n", "\u017fs 'S '\u017f", "",
]

NORMALIZER_INPUTS = ["Hello  World", "\u0130stanbul \u03a3\u039f\u03a3 STRASSE \u1e9e",
                     "e\u0301 and \u00e9", "tab\tand\u3000ideographic", "", " "]

ADDED_INPUTS = [
    "hello  <x>  world", "a<y>   b <y>\n c", "tok tokens mytok tok.", "x [N] y [n] z[N]",
    "<a><b><a><b><a>", "caf\u00e9 cafe\u0301 CAF\u00c9", "he said hello", "TOK Tok tok_ok",
    "\u3000<x>\u3000<y>\u3000", "<x><x>  <y><y>", "", "   ", "<p><q>ab",
]


def cases():
    out = []

    # Split behaviours (regex and literal, inverted or not), empty-match patterns.
    texts = ["a,b;;c,", ",,x", "no delimiters", ";", "a, b ,c"]
    for behavior in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"):
        for invert in (False, True):
            out.append({
                "name": f"split_regex_{behavior}_{'inverted' if invert else 'plain'}",
                "tokenizer": tokenizer_json(bpe(observable_vocab(texts), ignore_merges=True),
                                            pre=seq(split(r"[,;]", behavior, invert), byte_level())),
                "inputs": texts})
        out.append({
            "name": f"split_literal_{behavior}",
            "tokenizer": tokenizer_json(bpe(observable_vocab(texts), ignore_merges=True),
                                        pre=seq(split(", ", behavior, literal=True), byte_level())),
            "inputs": texts})
    for name, pattern, literal in (("split_empty_matches", "x*", False),
                                   ("split_empty_literal", "", True),
                                   ("split_lookbehind", r"(?<=a)b", False)):
        t = ["axxb", "bab", "ab", "xx", "aaxbx"]
        out.append({
            "name": name,
            "tokenizer": tokenizer_json(bpe(observable_vocab(t), ignore_merges=True),
                                        pre=seq(split(pattern, "Isolated", literal=literal),
                                                byte_level())),
            "inputs": t})

    # Oniguruma regex semantics: the Mistral and Qwen patterns, GPT-2's ByteLevel regex with and
    # without prefix space, \w, \h, anchors, case-insensitive groups.
    for name, pre in (
        ("regex_mistral", seq(split(MISTRAL), byte_level())),
        ("regex_qwen", seq(split(QWEN), byte_level())),
        ("regex_bytelevel_gpt2", byte_level(add_prefix_space=False, use_regex=True)),
        ("regex_bytelevel_gpt2_prefix", byte_level(add_prefix_space=True, use_regex=True)),
        ("regex_word_classes", seq(split(r"\w+|[^\w\s]+|\s+"), byte_level())),
        ("regex_hex_and_digits", seq(split(r"\h+|\d+"), byte_level())),
        ("regex_anchors", seq(split(r"^\S+|\S+$"), byte_level())),
        ("regex_case_insensitive", seq(split(r"(?i:'s|it)|\p{Lu}+"), byte_level())),
        ("regex_inverted_space", seq(split(r"\s", "Removed", True), byte_level(True, True))),
    ):
        out.append({"name": name,
                    "tokenizer": tokenizer_json(bpe(observable_vocab(REGEX_INPUTS), ignore_merges=True),
                                                pre=pre),
                    "inputs": REGEX_INPUTS})

    # Normalizers.
    for name, normalizer in (
        ("normalizer_nfc", {"type": "NFC"}),
        ("normalizer_lowercase", {"type": "Lowercase"}),
        ("normalizer_replace_literal", {"type": "Replace", "pattern": {"String": " "}, "content": "_"}),
        ("normalizer_replace_regex", {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "}),
        ("normalizer_sequence", {"type": "Sequence", "normalizers": [
            {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
            {"type": "Lowercase"}]}),
    ):
        out.append({"name": name, "normalizer": normalizer, "inputs": NORMALIZER_INPUTS,
                    "pre": seq(split(r"\s+|\S+"), byte_level())})

    # Added tokens: flags, normalised matching, overlaps, ids (listed ids disagree on purpose).
    added_tokens = [
        added(900, "<x>", special=True, lstrip=True), added(901, "<y>", special=True, rstrip=True),
        added(902, "tok", single_word=True, normalized=False), added(903, "[N]", normalized=True),
        added(904, "<a>", special=True), added(905, "<a><b>", special=True),
        added(906, "\u00e9", normalized=True), added(7, "he", normalized=False),
        added(950, "<p>", special=True), added(3, "<q>", special=False, normalized=False),
    ]
    out.append({"name": "added_tokens_flags", "normalizer": {"type": "Sequence", "normalizers": [
                    {"type": "NFC"}, {"type": "Lowercase"}]},
                "added_tokens": added_tokens, "inputs": ADDED_INPUTS, "in_vocab": ["he"],
                "pre": seq(split(r"\s+|\S+"), byte_level())})
    out.append({"name": "added_tokens_no_normalizer", "added_tokens": added_tokens,
                "inputs": ADDED_INPUTS, "in_vocab": ["he", "<q>"],
                "pre": seq(split(QWEN), byte_level())})

    # BPE options on a character vocabulary (no ByteLevel).
    chars = {"<unk>": 0, "a": 1, "b": 2, "c": 3, "##a": 4, "##b": 5, "##c": 6, "ab": 7, "abc": 8,
             "c</w>": 9, "##c</w>": 10, "b</w>": 11, "##b</w>": 12, "abc</w>": 13, "ab</w>": 14,
             "a</w>": 15, "##a</w>": 16, "ba": 17, "bab": 18, "abb</w>": 19}
    merges = [("a", "##b"), ("ab", "##c</w>"), ("ab", "##b</w>"), ("a", "##b</w>")]
    # (A Replace with an empty String pattern makes tokenizers 0.23 panic: not a case.)
    words = ["ab abc abb", "cab ba", "axb xx", "a\u00e9b", "b", ""]
    ws = split(r"\s+", "Removed")
    out.append({"name": "bpe_prefix_suffix_unk",
                "tokenizer": tokenizer_json(bpe(chars, merges, unk_token="<unk>",
                                                continuing_subword_prefix="##",
                                                end_of_word_suffix="</w>"), pre=ws),
                "inputs": words})
    out.append({"name": "bpe_prefix_suffix_fuse_unk",
                "tokenizer": tokenizer_json(bpe(chars, merges, unk_token="<unk>", fuse_unk=True,
                                                continuing_subword_prefix="##",
                                                end_of_word_suffix="</w>"), pre=ws),
                "inputs": words + ["axxxb", "xyz", "\u00e9\u00e9a"]})
    out.append({"name": "bpe_no_unk_drops",
                "tokenizer": tokenizer_json(bpe(chars, merges, continuing_subword_prefix="##",
                                                end_of_word_suffix="</w>"), pre=ws),
                "inputs": words})
    plain = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "ca": 6, "<unk>": 7, "cab": 8}
    fallback = dict(plain)
    for b in range(256):
        fallback[f"<0x{b:02X}>"] = len(fallback)
    partial = dict(plain)
    partial["<0xC3>"] = len(partial)  # only one byte of 'é'
    pm = [("a", "b"), ("b", "c"), ("ab", "c"), ("c", "a"), ("c", "ab"), ("a", "b")]  # a pair twice
    texts = ["abc cab", "a\u00e9b", "\u00e9", "x\u20acy", "bcab", "cabc", ""]
    out.append({"name": "bpe_byte_fallback",
                "tokenizer": tokenizer_json(bpe(fallback, pm, unk_token="<unk>", byte_fallback=True),
                                            pre=ws), "inputs": texts})
    out.append({"name": "bpe_byte_fallback_partial",
                "tokenizer": tokenizer_json(bpe(partial, pm, unk_token="<unk>", byte_fallback=True),
                                            pre=ws), "inputs": texts})
    out.append({"name": "bpe_ignore_merges",
                "tokenizer": tokenizer_json(bpe(plain, [("a", "b"), ("b", "c")], unk_token="<unk>",
                                                ignore_merges=True), pre=ws),
                "inputs": ["abc", "ab", "cab", "bcab", "abca"]})
    out.append({"name": "bpe_merge_order",
                "tokenizer": tokenizer_json(bpe(plain, [("b", "c"), ("a", "b"), ("ab", "c"), ("c", "a"),
                                                        ("c", "ab")], unk_token="<unk>"), pre=ws),
                "inputs": ["abc", "cabc", "abcab", "bcbc", "cababc"]})

    # Post-processors.
    voc = observable_vocab(["hello world"], extra=["<s>", "</s>", "<cls>", "<sep>", "<pad>"])
    ids = {t: voc[t] for t in ("<s>", "</s>", "<cls>", "<sep>", "<pad>")}
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<cls>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {
                    "<cls>": {"id": "<cls>", "ids": [ids["<cls>"], ids["<s>"]], "tokens": ["<cls>", "<s>"]},
                    "</s>": {"id": "</s>", "ids": [ids["</s>"]], "tokens": ["</s>"]}}}
    for name, post in (
        ("post_template", template),
        ("post_sequence", {"type": "Sequence", "processors": [byte_level(), template]}),
        ("post_bert", {"type": "BertProcessing", "sep": ["<sep>", ids["<sep>"]],
                       "cls": ["<cls>", ids["<cls>"]]}),
        ("post_roberta", {"type": "RobertaProcessing", "sep": ["</s>", ids["</s>"]],
                          "cls": ["<s>", ids["<s>"]], "trim_offsets": True, "add_prefix_space": False}),
        ("post_bytelevel", byte_level()),
    ):
        out.append({"name": name,
                    "tokenizer": tokenizer_json(bpe(voc, ignore_merges=True),
                                                pre=seq(split(r"\s+|\S+"), byte_level()), post=post),
                    "inputs": ["hello world", "hello", "", "world hello world hello"],
                    "runs": [
                        {"truncation": 3, "padding": None},
                        {"truncation": 4, "truncation_side": "left", "padding": None},
                        {"truncation": 6, "padding": 6, "padding_side": "left", "pad_id": ids["<pad>"]},
                        {"truncation": None, "padding": 5, "padding_side": "right", "pad_id": ids["<pad>"]},
                        {"truncation": 2, "padding": None, "add_special_tokens": False},
                    ]})
    return out


def materialise(case):
    """Cases given as normalizer / pre-tokenizer / added tokens get an observable vocabulary of
    their normalised inputs (computed with the library's own normalizer)."""
    from tokenizers import Tokenizer
    if "tokenizer" in case:
        return case
    base = tokenizer_json(bpe(byte_vocab(), ignore_merges=True), normalizer=case.get("normalizer"),
                          pre=case["pre"])
    tok = Tokenizer.from_str(json.dumps(base))
    forms = []
    for text in case["inputs"]:
        forms.append(text)
        if tok.normalizer is not None:
            forms.append(tok.normalizer.normalize_str(text))
    # Added tokens' contents stay out of the model vocabulary (so their ids follow the added
    # vocabulary's own rule), except those a case lists in "in_vocab".
    exclude = {bl(t["content"]) for t in case.get("added_tokens", [])
               if t["content"] not in case.get("in_vocab", ())}
    tj = tokenizer_json(bpe(observable_vocab(forms, exclude=exclude), ignore_merges=True),
                        normalizer=case.get("normalizer"), pre=case["pre"],
                        added_tokens=case.get("added_tokens", ()))
    return {"name": case["name"], "tokenizer": tj, "inputs": case["inputs"],
            "runs": case.get("runs", [])}


def run_case(case):
    from tokenizers import Tokenizer
    case = materialise(case)
    result = {"name": case["name"], "tokenizer": case["tokenizer"], "inputs": case["inputs"]}
    try:
        tok = Tokenizer.from_str(json.dumps(case["tokenizer"]))
    except Exception as e:  # noqa: BLE001
        result["load_error"] = str(e)
        return result
    result["ids"] = [tok.encode(t).ids for t in case["inputs"]]
    result["ids_no_special"] = [tok.encode(t, add_special_tokens=False).ids for t in case["inputs"]]
    result["added_vocab"] = {t.content: i for i, t in sorted(tok.get_added_tokens_decoder().items())}
    runs = []
    for run in case.get("runs", []):
        tok.no_truncation()
        tok.no_padding()
        if run.get("truncation") is not None:
            tok.enable_truncation(max_length=run["truncation"],
                                  direction=run.get("truncation_side", "right"))
        if run.get("padding") is not None:
            tok.enable_padding(direction=run.get("padding_side", "right"), pad_id=run["pad_id"],
                               length=run["padding"])
        add = run.get("add_special_tokens", True)
        encs = [tok.encode(t, add_special_tokens=add) for t in case["inputs"]]
        runs.append(dict(run, ids=[e.ids for e in encs], attention_mask=[e.attention_mask for e in encs]))
    if runs:
        result["runs"] = runs
    return result


def transformers_cases():
    """tokenizer.json + tokenizer_config.json folders through transformers' AutoTokenizer: config
    tokens missing from tokenizer.json's added_tokens, special tokens in the model vocab."""
    import transformers
    from transformers import AutoTokenizer
    texts = ["hello <pad> world", "a [MARK] b[MARK]c", "<extra>x</extra> <bos>", "plain text", ""]
    voc = observable_vocab(texts, extra=["<pad>", "<bos>", "<eos>"],
                           exclude={"[MARK]", "<extra>", "</extra>"})
    tj = tokenizer_json(bpe(voc, ignore_merges=True), pre=seq(split(QWEN), byte_level()),
                        added_tokens=[added(voc["<eos>"], "<eos>", special=True)])
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "model_max_length": 77,
        "added_tokens_decoder": {
            str(len(voc)): {"content": "[MARK]", "lstrip": True, "rstrip": False, "normalized": False,
                            "single_word": False, "special": False},
            str(len(voc) + 1): {"content": "<extra>", "lstrip": False, "rstrip": False,
                                "normalized": False, "single_word": False, "special": True}},
        "extra_special_tokens": ["<extra>", "</extra>"],
    }
    out = []
    with tempfile.TemporaryDirectory() as d:
        Path(d, "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
        Path(d, "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        errors = []
        for cls in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            config["tokenizer_class"] = cls
            Path(d, "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
            result = {"name": "transformers_config_tokens", "tokenizer": tj,
                      "tokenizer_config": dict(config), "inputs": texts,
                      "transformers": transformers.__version__}
            try:
                t = AutoTokenizer.from_pretrained(d)
                result["ids"] = [t(x).input_ids for x in texts]
                result["pad_id"] = t.pad_token_id
                result["bos_id"] = t.bos_token_id
                result["eos_id"] = t.eos_token_id
                result["class"] = type(t).__name__
                out.append(result)
                break
            except Exception as e:  # noqa: BLE001
                errors.append(f"{cls}: {e!r}")
        else:
            out.append({"name": "transformers_config_tokens", "error": "; ".join(errors)})
    return out


def main():
    import tokenizers
    results = []
    for case in cases():
        try:
            results.append(run_case(case))
        except BaseException as e:  # noqa: BLE001  (Rust panics are BaseExceptions)
            results.append({"name": case["name"], "error": repr(e)})
    try:
        results += transformers_cases()
    except Exception as e:  # noqa: BLE001
        results.append({"name": "transformers_config_tokens", "error": repr(e)})
    # Each distinct vocabulary is stored once, in "vocabs"; a case's model.vocab names it ("@N").
    vocabs, names = [], {}
    for r in results:
        model = r.get("tokenizer", {}).get("model")
        if not model:
            continue
        key = json.dumps(model["vocab"], ensure_ascii=False)
        if key not in names:
            names[key] = f"@{len(vocabs)}"
            vocabs.append(model["vocab"])
        model["vocab"] = names[key]
    doc = {"generator": "tests/unit/data/make_hf_tokenizer_cases.py",
           "tokenizers": tokenizers.__version__, "vocabs": vocabs, "cases": results}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    for r in results:
        if "error" in r or "load_error" in r:
            print("ERROR", r["name"], r.get("error", r.get("load_error")))
    print(len(results), "cases;", sum(1 for r in results if "error" in r or "load_error" in r), "with errors")


if __name__ == "__main__":
    main()
