# Sourced by CLI tests that compare runs. same_losses A B FIRST TOL LAST: the
# losses of steps FIRST..LAST in two metrics files (a resumed run appends;
# the last record of a step wins) are equal bit for bit (TOL 0) or within
# the relative tolerance TOL; a step missing from either file fails, and from
# FIRST = 1 so does any step past LAST (both runs have exactly 1..LAST).
same_losses() {
  python3 - "$1" "$2" "$3" "$4" "$5" <<'PY'
import json, sys
a, b, first, tol, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
def losses(p):
    out = {}
    for line in open(p):
        if line.strip():
            r = json.loads(line)
            out[r["step"]] = r["loss"]
    return out
la, lb = losses(a), losses(b)
want = set(range(first, last + 1))
exact = first == 1
ok = set(la) == set(lb) == want if exact else want <= set(la) and want <= set(lb)
assert ok, f"steps {first}-{last}: have {sorted(la)} and {sorted(lb)}"
for s in range(first, last + 1):
    x, y = la[s], lb[s]
    ok = x == y if tol == 0 else abs(x - y) <= tol * abs(y)
    assert ok, f"step {s}: {x!r} vs {y!r} (tolerance {tol})"
print(f"steps {first}-{last} agree" + (" bit for bit" if tol == 0 else f" within {tol}"))
PY
}
