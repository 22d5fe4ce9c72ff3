#!/usr/bin/env python3
"""Regenerate the tokenizer fixtures: two small byte-level BPE tokenizers
trained here with the Hugging Face `tokenizers` library, and what that library
encodes and decodes for a corpus of awkward text.

Writes, deterministically:
  tests/fixtures/tokenizers/gpt2_style/tokenizer.json
      byte-level BPE with GPT-2's pre-tokenizer (ByteLevel, use_regex=true),
      vocabulary 700, special token <|endoftext|>.
  tests/fixtures/tokenizers/llama3_style/tokenizer.json
      byte-level BPE as Llama 3 ships it: a Split pre-tokenizer with Llama 3's
      pattern followed by ByteLevel(use_regex=false), ignore_merges=true,
      special tokens <|begin_of_text|>, <|end_of_text|>, <|eot_id|>, and a
      TemplateProcessing post-processor that prepends <|begin_of_text|>.
  tests/fixtures/tokenizers/{llama2,metaspace,metaspace_split}_style/tokenizer.json
      SentencePiece-style BPE with byte fallback (vocabulary 600 + the 256
      <0x00>..<0xFF> tokens, unk/bos/eos, 80 base characters so rarer ones
      fall back to bytes), spelled three ways: Llama 2's "legacy" normalizer
      (Prepend + Replace, no pre-tokenizer, Replace/ByteFallback/Fuse/Strip
      decoder); a Metaspace pre-tokenizer prepending "first" without split
      (newer Llama/Mistral conversions); Metaspace "always" with split and the
      Metaspace decoder.
  tests/fixtures/tokenizers/cases.json
      for each tokenizer, per text: ids without and with special tokens; and
      per id sequence: decode() with skip_special_tokens true and false.
      Sequences include ones that cut multi-byte characters (decoded with
      U+FFFD replacement, as the library does).

The training text is the fortunes corpus (Debian's `fortunes`) plus the
multilingual lines below, so merges span multi-byte characters too.
Usage: python3 tools/make_tokenizer_fixtures.py [--out-dir tests/fixtures/tokenizers]
                                              [--kinds KIND ...]  (others kept as they are)
Needs: tokenizers (pip).
"""
import argparse
import glob
import json
import os
import random

from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors, trainers)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

MULTILINGUAL = [
    "Привет, мир! Как дела? Всё хорошо.",
    "你好，世界。今天天气很好，我们去公园散步吧。",
    "こんにちは世界。カタカナとひらがなと漢字。",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "Γειά σου κόσμε! Καλημέρα.",
    "Ünïcödé àccénts: café, naïve, façade, Straße, œuvre.",
    "한국어 문장도 있습니다. 안녕하세요!",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨",
]

CASES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'll tell you what WE'RE doing: it's what they've done, isn't it? You'D know.",
    "   leading spaces, and trailing   ",
    "tabs\tand\t\ttabs\n\nnew lines\r\nCRLF\r\n\r\n  \n\t x",
    "digits 1234567890 and 3.14159 and 1,000,000 and 007",
    "      \n\n\n        a long run of whitespace         \n",
    "Привет, мир! Ещё немного текста.",
    "中文字符和标点：“引号”，以及English混合。",
    "日本語のテキスト、カタカナ、ひらがな。",
    "عربي مع أرقام ١٢٣ و 456",
    "Emoji 😀 and families 👨‍👩‍👧‍👦 and flags 🇫🇷🇯🇵 and skin 👍🏽!",
    "combining: e\u0301 a\u0308 n\u0303 and a zero\u200bwidth space",
    "special inside text: hello<|endoftext|>world <|eot_id|> and <|begin_of_text|>x",
    "symbols: #$%&*()[]{}<>~`^|\\/@!?;:\"'",
    "x" * 300,
    "a",
    "",
    "   ",
    "\n",
    "mixed 12abc34 ab12 1a2b3c 'quoted' \"double\" -- dash — em – en",
]


SP_KINDS = ("llama2_style", "metaspace_style", "metaspace_split_style")
META = "\u2581"

# Extra texts for the SentencePiece-style kinds: their special tokens inside
# text, leading spaces, and "▁" itself.
SP_CASES = [
    "<s>hello</s> world <s> x",
    " one leading space",
    "  two leading spaces",
    "already \u2581 a meta symbol",
    "rare characters fall back: \u00fe \u0416 \u4e2d \U0001f600 \u2603",
]


def train_sentencepiece(kind, corpus):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # Trained on words that each start with "▁" (as SentencePiece's pieces do),
    # then spelled as the kind says.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2, limit_alphabet=80,
                                  special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    j = json.loads(tok.to_str())
    # The 256 byte tokens right after the specials, as Llama 2's file has them.
    vocab = {t: (i if i < 3 else i + 256) for t, i in j["model"]["vocab"].items()}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = 3 + b
    j["model"]["vocab"] = vocab
    byte_fallback_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": META}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    if kind == "llama2_style":
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": META},
            {"type": "Replace", "pattern": {"String": " "}, "content": META}]}
        j["pre_tokenizer"] = None
        j["decoder"] = byte_fallback_decoder
    elif kind == "metaspace_style":
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": META,
                              "prepend_scheme": "first", "split": False}
        j["decoder"] = byte_fallback_decoder
    else:
        j["decoder"] = {"type": "Metaspace", "replacement": META, "prepend_scheme": "always",
                        "split": True}
    tok = Tokenizer.from_str(json.dumps(j))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    return tok


def train(kind, corpus):
    if kind in SP_KINDS:
        return train_sentencepiece(kind, corpus)
    if kind == "gpt2_style":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        specials = ["<|endoftext|>"]
        vocab = 700
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
        vocab = 900
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    if kind == "llama3_style":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)]),
        ])
    return tok


def decode_cases(tok, rng):
    """Id sequences to decode: whole encodings, and slices that cut characters."""
    seqs = []
    for text in CASES[:14]:
        ids = tok.encode(text, add_special_tokens=False).ids
        if not ids:
            continue
        seqs.append(ids)
        for _ in range(2):  # a slice that may start or end inside a character
            a = rng.randrange(len(ids))
            b = rng.randrange(a, len(ids)) + 1
            seqs.append(ids[a:b])
    # single tokens, specials included, and single raw bytes (invalid alone)
    n = tok.get_vocab_size()
    seqs.append(list(range(0, n, max(1, n // 60))))
    if tok.token_to_id("<0x41>") is not None:  # byte tokens: valid runs, cut runs, mixed
        b = lambda *xs: [tok.token_to_id(f"<0x{x:02X}>") for x in xs]
        word = tok.encode("hello", add_special_tokens=False).ids
        seqs += [b(0xE4, 0xB8, 0xAD), b(0xE4, 0xB8), b(0xF0, 0x9F, 0x98, 0x80, 0xE4),
                 word + b(0xE4, 0xB8) + word, b(0x41) + [1] + b(0x42), [1] + word + b(0xFF)]
    else:
        byte_ids = [tok.token_to_id(ch) for ch in pre_tokenizers.ByteLevel.alphabet()]
        seqs.append(sorted(i for i in byte_ids if i is not None)[-40:])
    return seqs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default="tests/fixtures/tokenizers")
    ap.add_argument("--kinds", nargs="+", default=["gpt2_style", "llama3_style", *SP_KINDS])
    args = ap.parse_args()
    files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                   if not f.endswith((".dat", ".u8")) and os.path.isfile(f))
    if not files:
        raise SystemExit("needs Debian's `fortunes` package for the training text")
    corpus = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            corpus.extend(fh.read().split("\n%\n"))
    corpus.extend(MULTILINGUAL * 20)

    cases_path = os.path.join(args.out_dir, "cases.json")
    out = {}
    if os.path.exists(cases_path):  # kinds not asked for keep their cases
        with open(cases_path, encoding="utf-8") as fh:
            out = json.load(fh)
    for kind in args.kinds:
        rng = random.Random(1234)
        tok = train(kind, corpus)
        d = os.path.join(args.out_dir, kind)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # what the file says
        enc = []
        for text in CASES + MULTILINGUAL + (SP_CASES if kind in SP_KINDS else []):
            enc.append({"text": text,
                        "ids": tok.encode(text, add_special_tokens=False).ids,
                        "ids_special": tok.encode(text, add_special_tokens=True).ids})
        dec = []
        for ids in decode_cases(tok, rng):
            dec.append({"ids": ids,
                        "skip_special": tok.decode(ids, skip_special_tokens=True),
                        "keep_special": tok.decode(ids, skip_special_tokens=False)})
        out[kind] = {"vocab_size": tok.get_vocab_size(), "encode": enc, "decode": dec}
    with open(cases_path, "w", encoding="utf-8") as fh:
        json.dump(out, fh, ensure_ascii=True, indent=0)
        fh.write("\n")
    for kind in out:
        print(f"{kind}: vocab {out[kind]['vocab_size']}, {len(out[kind]['encode'])} encode cases, "
              f"{len(out[kind]['decode'])} decode cases")


if __name__ == "__main__":
    main()
