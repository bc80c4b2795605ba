#!/usr/bin/python3
"""Trains the spec model's tokenizer: a byte-level BPE `tokenizer.json` (Hugging Face format) on
data/corpus.txt, at most 8192 ids so that it fits the model's vocabulary. Standard library only;
deterministic (ties go to the smaller pair).

    /usr/bin/python3 data/make_tokenizer.py [--vocab 8192] [CORPUS] [OUT]

Ids: 0 is <|bos|> (prepended by the post-processor, as Laguna prepends its BOS), 1 is
<|endoftext|>, 2..257 the 256 bytes, then one id a merge, in the order they were learned."""
import argparse
import collections
import json
import re

SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
# the same split for training, in Python's re (letters: [^\W\d_])
TRAIN_SPLIT = re.compile(r"'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])|[^\r\n\w]?[^\W\d_]+|\d|"
                         r" ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|bos|>", "<|endoftext|>"]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train(text, vocab_size):
    b2u = bytes_to_unicode()
    words = collections.Counter(TRAIN_SPLIT.findall(text))
    seqs = [[b2u[b] for b in w.encode()] for w in words]
    freq = list(words.values())
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, s in enumerate(seqs):
        for a, b in zip(s, s[1:]):
            pairs[a, b] += freq[i]
            where[a, b].add(i)
    merges = []
    n_base = len(SPECIAL) + 256
    while n_base + len(merges) < vocab_size and pairs:
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if best[1] < 2:
            break
        (a, b), _ = best
        merges.append((a, b))
        for i in list(where[a, b]):
            s, f = seqs[i], freq[i]
            for x, y in zip(s, s[1:]):  # forget the word's old pairs
                pairs[x, y] -= f
                if pairs[x, y] <= 0:
                    del pairs[x, y]
                where[x, y].discard(i)
            out, k = [], 0
            while k < len(s):
                if k + 1 < len(s) and s[k] == a and s[k + 1] == b:
                    out.append(a + b)
                    k += 2
                else:
                    out.append(s[k])
                    k += 1
            seqs[i] = out
            for x, y in zip(out, out[1:]):
                pairs[x, y] += f
                where[x, y].add(i)
    return b2u, merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("corpus", nargs="?", default="data/corpus.txt")
    ap.add_argument("out", nargs="?", default="data/tokenizer.json")
    a = ap.parse_args()
    b2u, merges = train(open(a.corpus, encoding="utf-8").read(), a.vocab)
    vocab = {s: i for i, s in enumerate(SPECIAL)}
    for b in range(256):
        vocab[b2u[b]] = len(vocab)
    for x, y in merges:
        vocab.setdefault(x + y, len(vocab))
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, s in enumerate(SPECIAL)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [0], "tokens": ["<|bos|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": [[x, y] for x, y in merges]},
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{a.out}: {len(vocab)} ids ({len(merges)} merges) from {a.corpus}")


if __name__ == "__main__":
    main()
