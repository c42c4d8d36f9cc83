#!/usr/bin/env python3
"""tests/data/bpe_reference.py: the reference side of tests/data/bpe_tokenizer_test.cpp. Hugging Face's tokenizers
trains byte-level BPE tokenizers on this machine's license texts (no real tokenizer.json can be downloaded here)
and gives the ids that zhost's tokenizer must equal.

  bpe_reference.py DIR [--bytes N] [--vocab V]
      DIR/corpus.txt: /usr/share/common-licenses/* then /usr/share/doc/*/copyright, in sorted order, whole files
        until N bytes (default 4 MiB) are passed, joined by <|endoftext|>, and a paragraph of odd Unicode
        (contractions, digits, spaces of every kind, scripts without spaces, emoji, CRLF).
      For each KIND, DIR/KIND.json and DIR/KIND.ids (uint32 little-endian, `encode(text, add_special_tokens=False)`):
        gpt2         ByteLevelBPETokenizer trained on the corpus with V tokens: GPT-2's format (ByteLevel
                     pre-tokenizer with its regex, merges as [a, b] pairs, <|endoftext|> an added special token)
        gpt2-legacy  the same tokenizer.json with merges written "a b", as tokenizers before 0.20 wrote them
        gpt2-prefix  the same with ByteLevel's add_prefix_space on
        llama3       Llama 3's format: Split with Llama 3's regex, then ByteLevel without its regex,
                     ignore_merges, <|begin_of_text|> and <|end_of_text|> added
        unk          GPT-2's format trained on the ASCII of the corpus's first 300 kB without the initial
                     alphabet, so other bytes are not in the vocab, with unk_token <unk>
        unk-fused    the same with fuse_unk
      DIR/random.txt and DIR/KIND.random.ids: the same for 300k random characters drawn (seed 1) from pools of
        the cases the split regexes tell apart (every kind of space, \r\n, contractions in either case, letters,
        digits and marks of many scripts, emoji, added tokens whole and cut).
      DIR/gpt2.pieces, DIR/llama3.pieces, DIR/gpt2.random.pieces, DIR/llama3.random.pieces: the split regexes'
        pieces of corpus.txt and random.txt (HF's pre_tokenize_str of ByteLevel, and of Llama 3's Split), as the
        UTF-8 byte length of each piece (uint32): what zhost's splitter must cut, before any merge hides it.
      Prints one JSON line: corpus bytes, and per kind the vocab size (added tokens included), the token count, and
      the seconds HF's encode took (one thread), wall-clock and CPU (the process's).
"""
import argparse
import glob
import json
import os
import random
import struct
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import ByteLevelBPETokenizer, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

ODD_TEXT = (
    "It's, they're, we've, I'm, you'll, he'd; IT'S THEY'RE 'LL 'S x'\u017f 'tis ''quoted'' '\n"
    "Numbers: 1 12 123 1234 12345, 3.14159, \u0661\u0662\u0663 \u00bd \u2167 \U0001d7d8\U0001d7d9 \u2460\n"
    "Spaces: a  b   c\t\td \u00a0e\u2003f\u3000g\u0085h\u2028i\u2029j \x1c k \x1f l\u200bm\n"
    "   leading, trailing   \n\n\n  \t\n"
    "Scripts: caf\u00e9 na\u00efve \u0441\u043b\u043e\u0432\u043e \u03bb\u03cc\u03b3\u03bf\u03c2 "
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0 \ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 "
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\n"
    "Emoji: \U0001f600\U0001f389 \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f flags \U0001f1eb\U0001f1f7\n"
    "Windows lines\r\nend\r\n\r\nhere \r\n"
    "Punctuation: (a) [b] {c} <d> \"e\" -- f... g!? #h @i $5 %6 ^7 &8 *9 _10_ ~11 `12`\n"
    "<|endoftext|><|endoftext|> <|begin_of_text|>x<|end_of_text|>\n"
    "The end, with no newline"
)


RANDOM_POOLS = [
    # (weight, strings)
    (30, list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")),
    (15, [" "]),
    (6, list("0123456789")),
    (6, list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'")),
    (6, ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "'\u017f", "'x"]),
    (6, ["\n", "\r", "\r\n", "\t", "\v", "\f", "\x85", "\xa0", "\u1680", "\u2000", "\u2009", "\u200a",
         "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\x1c", "\x1f", "\u200b", "\u180e"]),
    (5, list("\u00e9\u00df\u00f1\u0101\u01c5\u02b0\u03bb\u0416\u05d0\u0627\u0915\u0e01\u10d0\u1100"
             "\u3042\u30a2\u4e2d\uac00\u212a\u017f\U00010400\U00020000")),
    (3, list("\u0301\u0308\u093e\u0e31\u200d\ufe0f\u20dd")),  # marks: neither letters nor numbers
    (3, list("\u00b2\u00bd\u0661\u06f5\u0966\u2167\u2460\uff15\U0001d7d8\U00010107")),
    (2, list("\U0001f600\U0001f389\u2764\U0001f1eb\u00a9\u2014\u00ab\u00bb\u2026")),
    (1, ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|endof", "<|", "|>"]),
]


def random_text(count):
    rng = random.Random(1)
    weights = [w for w, _ in RANDOM_POOLS]
    pools = [p for _, p in RANDOM_POOLS]
    return "".join(rng.choice(rng.choices(pools, weights)[0]) for _ in range(count))


def corpus(limit):
    files = sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(glob.glob("/usr/share/doc/*/copyright"))
    texts, size = [], 0
    for path in files:
        if size >= limit or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError:
            continue
        texts.append(text)
        size += len(text.encode())
    return "<|endoftext|>".join(texts) + "<|endoftext|>" + ODD_TEXT


def write_ids(path, ids):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}I", *ids))


def write_pieces(path, text, pre_tokenizer):
    """The byte lengths of the pieces pre_tokenizer cuts text into (its offsets count characters)."""
    lengths, at = [], 0
    for _, (start, end) in pre_tokenizer.pre_tokenize_str(text):
        assert start == at, "the pieces cover the text"
        lengths.append(len(text[start:end].encode()))
        at = end
    assert at == len(text)
    write_ids(path, lengths)


def encode(tokenizer, text, out_dir, kind, report):
    start, start_cpu = time.perf_counter(), time.process_time()
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    tokenizer.save(os.path.join(out_dir, kind + ".json"))
    write_ids(os.path.join(out_dir, kind + ".ids"), ids)
    report[kind] = {"vocab": tokenizer.get_vocab_size(with_added_tokens=True), "tokens": len(ids), "seconds": seconds,
                    "cpu_seconds": cpu_seconds}
    with open(os.path.join(out_dir, "random.txt"), encoding="utf-8", newline="") as f:
        write_ids(os.path.join(out_dir, kind + ".random.ids"), tokenizer.encode(f.read(), add_special_tokens=False).ids)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--bytes", type=int, default=4 << 20)
    parser.add_argument("--vocab", type=int, default=8000)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    text = corpus(args.bytes)
    corpus_path = os.path.join(args.dir, "corpus.txt")
    with open(corpus_path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    report = {"bytes": len(text.encode())}
    with open(os.path.join(args.dir, "random.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(random_text(300000))

    gpt2 = ByteLevelBPETokenizer()
    gpt2.train([corpus_path], vocab_size=args.vocab, min_frequency=2, special_tokens=["<|endoftext|>"],
               show_progress=False)
    gpt2 = Tokenizer.from_str(gpt2.to_str())
    encode(gpt2, text, args.dir, "gpt2", report)

    legacy = json.loads(gpt2.to_str())
    assert all(isinstance(m, list) for m in legacy["model"]["merges"]), "tokenizers wrote merges as pairs"
    legacy["model"]["merges"] = [" ".join(m) for m in legacy["model"]["merges"]]
    encode(Tokenizer.from_str(json.dumps(legacy)), text, args.dir, "gpt2-legacy", report)

    prefix = json.loads(gpt2.to_str())
    prefix["pre_tokenizer"]["add_prefix_space"] = True
    encode(Tokenizer.from_str(json.dumps(prefix)), text, args.dir, "gpt2-prefix", report)

    llama3 = Tokenizer(models.BPE(ignore_merges=True))
    llama3.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    llama3.decoder = decoders.ByteLevel()
    llama3.train([corpus_path], trainers.BpeTrainer(
        vocab_size=args.vocab, min_frequency=2, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    saved = json.loads(llama3.to_str())
    assert saved["model"]["ignore_merges"] is True, "ignore_merges survived training"
    assert saved["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == LLAMA3_REGEX
    encode(llama3, text, args.dir, "llama3", report)

    ascii_path = os.path.join(args.dir, "ascii.txt")
    with open(ascii_path, "w", encoding="utf-8", newline="") as f:
        f.write(text[:300000].encode("ascii", "ignore").decode())
    for kind, fuse in (("unk", False), ("unk-fused", True)):
        unk = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=fuse))
        unk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        unk.train([ascii_path], trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, special_tokens=["<unk>"],
                                                    show_progress=False))
        assert json.loads(unk.to_str())["model"]["fuse_unk"] is fuse
        encode(unk, text, args.dir, kind, report)

    with open(os.path.join(args.dir, "random.txt"), encoding="utf-8", newline="") as f:
        random_chars = f.read()
    splits = {"gpt2": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
              "llama3": pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False)}
    for kind, pre_tokenizer in splits.items():
        write_pieces(os.path.join(args.dir, kind + ".pieces"), text, pre_tokenizer)
        write_pieces(os.path.join(args.dir, kind + ".random.pieces"), random_chars, pre_tokenizer)
    print(json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
