#!/bin/sh
# nlohmann/json's own unit tests (doctest), every function of every test
# object rewritten by `mantle instr rewrite --all` (default exits), linked
# with the runtime and run: the test report, the refusals by reason, and
# whether the Chrome trace of the run nests (issue 35: C++ complete).
# A hand run, not CI (compiling the tests takes minutes).
#
#   bench/instr/nlohmann_tests.sh JSON_SRC [TEST...]
#
# JSON_SRC: a checkout of github.com/nlohmann/json (single_include/ and
# tests/); TEST: names of tests/src/unit-NAME.cpp that need no test data
# files (default below). Needs target/release/mantle and
# target/release/libmantle_instr_rt.a (cargo build --release -p mantle-cli
# -p mantle-instr-rt), or MANTLE and MANTLE_INSTR_RT naming others. Works
# in a temporary directory, removed at the end.
set -eu
src=$(cd "$1" && pwd); shift
root=$(cd "$(dirname "$0")/../.." && pwd)
mantle=${MANTLE:-$root/target/release/mantle}
rt=${MANTLE_INSTR_RT:-$root/target/release/libmantle_instr_rt.a}
tests=${*:-class_parser element_access1 element_access2 json_pointer deserialization conversions iterators1 json_patch modifiers}
w=$(mktemp -d /tmp/mantle-nlohmann.XXXXXX)
trap 'rm -rf "$w"' EXIT
cd "$w"
objs=""; iobjs=""
for t in unit $tests; do
	s=$src/tests/src/unit-$t.cpp; [ "$t" = unit ] && s=$src/tests/src/unit.cpp
	c++ -std=c++17 -O1 -I "$src/single_include" -I "$src/tests/thirdparty/doctest" -I "$src/tests/src" -c "$s" -o "$t.o"
	"$mantle" instr rewrite "$t.o" -o "$t.instr.o" --all --map map.tsv --json > "$t.json"
	objs="$objs $t.o"; iobjs="$iobjs $t.instr.o"
done
c++ $objs -o orig
c++ $iobjs "$rt" -lpthread -ldl -o instr
python3 - $tests <<'PY'
import collections, json, sys
c = collections.Counter()
for t in ["unit"] + sys.argv[1:]:
    for f in json.load(open(t + ".json"))["functions"]:
        c[(f["status"], f.get("exit") or f["reason"]["kind"])] += 1
print("functions:", dict(c))
PY
./orig | tail -3
MANTLE_INSTR_TRACE=t.json MANTLE_INSTR_OUT=p.json MANTLE_INSTR_MAP=map.tsv ./instr | tail -3
python3 - <<'PY'
import collections, json
ev = [e for e in json.load(open("t.json"))["traceEvents"] if e["ph"] == "X"]
by = collections.defaultdict(list)
for e in ev:
    by[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
bad = 0
for evs in by.values():
    evs.sort(key=lambda x: (x[0], -x[1]))
    st = []
    for e in evs:
        while st and e[0] >= st[-1][1] - 0.002 and e[1] > st[-1][1] + 0.002:
            st.pop()
        if st and e[1] > st[-1][1] + 0.002:
            bad += 1
        st.append(e)
calls = sum(f["calls"] for f in json.load(open("p.json"))["functions"])
thrown = sum(f["calls"] for f in json.load(open("p.json"))["functions"]
             if "create" in f["name"] and ("parse_error" in f["name"] or "type_error" in f["name"]
                                           or "out_of_range" in f["name"] or "invalid_iterator" in f["name"]))
print(f"trace: {len(ev)} events, {bad} nesting violations; {calls} calls; {thrown} exceptions created")
PY
