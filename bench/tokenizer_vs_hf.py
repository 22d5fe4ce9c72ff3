#!/usr/bin/env python3
"""Tokenizer throughput: `meshtrain data prepare --tokenizer` against the
Hugging Face `tokenizers` library's encode_batch (Rust, the same thread count
through RAYON_NUM_THREADS) and tiktoken (the same BPE loaded as mergeable
ranks, single-threaded), on the same text, rounds interleaved, medians.

The tokenizer is trained here with the `tokenizers` library on the fortunes
corpus (Debian's `fortunes`; vocabulary --vocab, GPT-2's ByteLevel
pre-tokenizer, or Llama 3's Split pattern with --llama3), so nothing is
downloaded. The text is the same corpus, --copies times with the line order
shuffled per copy (so every side sees more than its warm-up).

meshtrain's figure is the whole command's wall time (start, reading files,
encoding, writing shards); the peers' only their encode call. Each side's ids
are checked equal to the library's.

  python3 bench/tokenizer_vs_hf.py --threads 1 2 --rounds 5
Needs: tokenizers, tiktoken (pip).
"""
import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def corpus_docs():
    files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                   if not f.endswith((".dat", ".u8")) and os.path.isfile(f))
    if not files:
        raise SystemExit("needs Debian's `fortunes` package")
    docs = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            docs.extend(d for d in fh.read().split("\n%\n") if d)
    return docs


def train_tokenizer(docs, vocab, llama3, path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(ignore_merges=llama3))
    if llama3:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    tok.save(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--llama3", action="store_true", help="Llama 3's split pattern")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "meshtrain"))
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="mt_tok_bench_")
    docs = corpus_docs()
    tok_path = os.path.join(tmp, "tokenizer.json")
    train_tokenizer(docs, a.vocab, a.llama3, tok_path)
    rng = random.Random(1)
    text_dir = os.path.join(tmp, "text")
    os.makedirs(text_dir)
    texts = []
    for c in range(a.copies):
        d = docs[:]
        rng.shuffle(d)
        body = "\n".join(d) + "\n"
        texts.append(body)
        with open(os.path.join(text_dir, f"copy{c}.txt"), "w", encoding="utf-8") as fh:
            fh.write(body)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)

    # The peers' units of work: the same chunks meshtrain encodes (~4 KiB, cut
    # at a newline before a printable byte), so batching is comparable.
    def chunks(t):
        out, pos = [], 0
        while pos < len(t):
            end = len(t)
            j = pos + 4095
            while j < len(t):
                nl = t.find("\n", j)
                if nl < 0:
                    break
                if nl + 1 < len(t) and "!" <= t[nl + 1] <= "~":
                    end = nl + 1
                    break
                j = nl + 1
            out.append(t[pos:end])
            pos = end
        return out
    units = [u for t in texts for u in chunks(t)]

    import tiktoken
    from tokenizers import Tokenizer
    vocab = json.load(open(tok_path))["model"]["vocab"]
    sys.path.insert(0, ROOT)
    byte_dec = {}
    n = 0
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_dec = {chr(c): b for b, c in zip(bs, cs)}
    ranks = {bytes(byte_dec[ch] for ch in t): i for t, i in vocab.items()}
    enc = tiktoken.Encoding("bench", pat_str=LLAMA3 if a.llama3 else GPT2,
                            mergeable_ranks=ranks, special_tokens={})

    hf_ref = Tokenizer.from_file(tok_path)
    ref_ids = [e.ids for e in hf_ref.encode_batch(units, add_special_tokens=False)]
    tk_ids = enc.encode_ordinary_batch(units, num_threads=1)
    tk_same = tk_ids == ref_ids

    with open(os.path.join(tmp, "units.json"), "w") as fh:
        json.dump(units, fh)
    results = {("meshtrain", t): [] for t in a.threads}
    results.update({("hf", t): [] for t in a.threads})
    results[("tiktoken", 1)] = []
    mt_same = None
    for r in range(a.rounds):
        line = f"round {r + 1}:"
        for t in a.threads:
            out = os.path.join(tmp, "out")
            t0 = time.perf_counter()
            subprocess.run([a.binary, "data", "prepare", "--input", text_dir, "--out", out,
                            "--tokenizer", tok_path, "--threads", str(t), "--val-fraction", "0"],
                           check=True, stdout=subprocess.DEVNULL)
            results[("meshtrain", t)].append(nbytes / (time.perf_counter() - t0) / 1e6)
            if mt_same is None:
                got = subprocess.run([sys.executable, "-c", (
                    "import struct,sys,glob\n"
                    "ids=[]\n"
                    "for f in sorted(glob.glob(sys.argv[1]+'/train_*.bin')):\n"
                    "  b=open(f,'rb').read(); h=struct.unpack('<3i',b[:12]); w=2 if h[1]==1 else 4\n"
                    "  ids+=struct.unpack('<%d%s'%(h[2],'H' if w==2 else 'I'),b[1024:])\n"
                    "print(len(ids), sum(i*(k%97+1) for k,i in enumerate(ids)))"), out],
                    check=True, capture_output=True, text=True).stdout.split()
                flat = [i for ids in ref_ids for i in ids]
                mt_same = got == [str(len(flat)), str(sum(i * (k % 97 + 1) for k, i in enumerate(flat)))]
            # The library in a child process, so RAYON_NUM_THREADS takes effect.
            hf = subprocess.run([sys.executable, "-c", (
                "import sys,time,json\n"
                "from tokenizers import Tokenizer\n"
                "tok=Tokenizer.from_file(sys.argv[1]); units=json.load(open(sys.argv[2]))\n"
                "t0=time.perf_counter(); tok.encode_batch(units, add_special_tokens=False)\n"
                "print(time.perf_counter()-t0)"), tok_path, os.path.join(tmp, "units.json")],
                check=True, capture_output=True, text=True,
                env=dict(os.environ, RAYON_NUM_THREADS=str(t)))
            results[("hf", t)].append(nbytes / float(hf.stdout) / 1e6)
            line += f" | {t}T meshtrain {results[('meshtrain', t)][-1]:.1f} MB/s, HF {results[('hf', t)][-1]:.1f}"
        t0 = time.perf_counter()
        enc.encode_ordinary_batch(units, num_threads=1)
        results[("tiktoken", 1)].append(nbytes / (time.perf_counter() - t0) / 1e6)
        line += f" | tiktoken 1T {results[('tiktoken', 1)][-1]:.1f}"
        print(line, flush=True)

    med = {k: statistics.median(v) for k, v in results.items() if v}
    print(f"\ntext {nbytes / 1e6:.1f} MB, vocabulary {a.vocab}, "
          f"{'Llama 3' if a.llama3 else 'GPT-2'} split pattern; ids equal to the library's: "
          f"meshtrain {'yes' if mt_same else 'NO'}, tiktoken {'yes' if tk_same else 'NO'}")
    print("medians (MB/s of input text):")
    for t in a.threads:
        if ("hf", t) in med:
            print(f"  {t} thread(s): meshtrain {med[('meshtrain', t)]:.1f}  HF encode_batch "
                  f"{med[('hf', t)]:.1f}  ratio {med[('meshtrain', t)] / med[('hf', t)]:.2f}x")
    tk = med[("tiktoken", 1)]
    for t in a.threads:
        print(f"  meshtrain {t} thread(s) vs tiktoken 1 thread ({tk:.1f}): "
              f"{med[('meshtrain', t)] / tk:.2f}x")


if __name__ == "__main__":
    main()
