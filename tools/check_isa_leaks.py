#!/usr/bin/env python3
"""Checks a binary for instructions above the baseline outside dispatched code.

The portable build compiles everything for x86-64-v2 except the kernels
compiled once per ISA level (namespaces isa_avx2 / isa_avx512) and a few
functions with target attributes (named *_avx2, *_avx512, *_f16c). If an
inline function or template instantiated inside an AVX-512 kernel file were
the copy the linker kept, baseline code would call it and die with SIGILL on
an AVX2 CPU. This finds such functions: any VEX/EVEX instruction (ymm, zmm,
mask registers, or a 'v'-prefixed SIMD mnemonic) in a function that is not
allowed it, and any AVX-512 instruction in an avx2 one.

usage: check_isa_leaks.py BINARY   (exit 1 and a list when something leaks)
"""
import re
import subprocess
import sys

ALLOWED_AVX512 = re.compile(r"isa_avx512::|_avx512\b|_avx512\(|stream_body_avx512|bf16_round16")
ALLOWED_AVX2 = re.compile(r"isa_avx2::|_avx2\b|_avx2\(|_f16c\(|stream_body_avx2|bf16_round8")
# Mnemonics that are not AVX despite starting with 'v' (system instructions).
NOT_AVX = {"verr", "verw", "vmcall", "vmlaunch", "vmresume", "vmxoff", "vmptrld", "vmread", "vmwrite"}


def scan(binary):
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", binary],
                         check=True, capture_output=True, text=True).stdout
    func = None
    bad = {}
    head = re.compile(r"^[0-9a-f]+ <(.*)>:$")
    for line in out.splitlines():
        m = head.match(line)
        if m:
            func = m.group(1)
            continue
        if func is None or "\t" not in line:
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        insn = parts[1].strip()
        if not insn:
            continue
        mnem = insn.split()[0]
        # Drop the disassembler's annotations: "# addr <symbol>" and "<symbol>".
        operands = re.sub(r"#.*|<.*", "", insn[len(mnem):])
        avx512 = "%zmm" in operands or re.search(r"%k[0-7]", operands) or "{" in operands
        avx = avx512 or "%ymm" in operands or (mnem.startswith("v") and mnem not in NOT_AVX)
        if not avx:
            continue
        if ALLOWED_AVX512.search(func):
            continue
        if ALLOWED_AVX2.search(func) and not avx512:
            continue
        bad.setdefault(func, insn)
    return bad


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bad = scan(sys.argv[1])
    if bad:
        print(f"{len(bad)} function(s) outside the dispatched kernels use AVX/AVX-512:")
        for f, insn in sorted(bad.items())[:50]:
            print(f"  {f}\n      e.g. {insn}")
        return 1
    print(f"{sys.argv[1]}: no AVX/AVX-512 instructions outside the dispatched kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
