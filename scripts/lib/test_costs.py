#!/usr/bin/env python3
"""scripts/lib/test_costs.py: the test tiers of scripts/test, from measured test times.

tests/ctest_costs.txt holds one line per test, "NAME RUNS SECONDS" (ctest's CTestCostData format): ctest starts
the longest tests first with it, and it defines the fast tier.

  select-fast COSTS NAMES      ctest -I numbers of the fast tier: the tests of NAMES (`ctest -N`'s output) whose
                               recorded time is under FAST_SECONDS, and those with no time yet (new tests)
  refresh COSTS MEASURED NAMES rewrite COSTS from ctest's own MEASURED times after a full run, when the set of
                               tests changed or a test's time moved by more than 2x and 0.5 s (so that noise
                               does not rewrite it); prints what changed
"""
import re
import sys

FAST_SECONDS = 1.0


def read_costs(path):
    costs = {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("---"):  # ctest lists the last failures after this line
                    break
                parts = line.rstrip("\n").rsplit(" ", 2)
                if len(parts) == 3:
                    costs[parts[0]] = float(parts[2])
    except FileNotFoundError:
        pass
    return costs


def read_names(path):
    """`ctest -N` output -> [(number, name)]"""
    tests = []
    with open(path) as f:
        for line in f:
            match = re.match(r"^\s*Test\s+#(\d+): (.*)$", line.rstrip("\n"))
            if match:
                tests.append((int(match.group(1)), match.group(2)))
    return tests


def select_fast(costs_path, names_path):
    costs = read_costs(costs_path)
    numbers = [n for n, name in read_names(names_path) if costs.get(name, 0.0) < FAST_SECONDS]
    if not numbers:
        sys.exit("test_costs: no test is in the fast tier")
    print("0,0,0," + ",".join(map(str, numbers)))  # ctest -I: start, end, stride, then test numbers


def refresh(costs_path, measured_path, names_path):
    old, measured = read_costs(costs_path), read_costs(measured_path)
    names = [name for _, name in read_names(names_path)]
    raw = [name for name in names if re.search(r"GetParam\(\) = \d+-byte object <", name)]
    if raw:  # gtest printed a parameter's bytes (pointers among them): the name changes from build to build
        print(f"test_costs: {len(raw)} test names hold a parameter's raw bytes; give its type a PrintTo: {raw[0]}")
    new = {name: measured.get(name, old.get(name)) for name in names}
    new = {name: cost for name, cost in new.items() if cost is not None}
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    moved = [n for n in new if n in old and abs(new[n] - old[n]) > 0.5 and max(new[n], old[n]) > 2 * min(new[n], old[n])]
    if not (added or removed or moved):
        print(f"test_costs: {costs_path} is current ({len(new)} tests)")
        return
    with open(costs_path, "w") as f:
        for name, cost in sorted(new.items(), key=lambda item: -item[1]):
            f.write(f"{name} 1 {cost:.2f}\n")
    print(f"test_costs: refreshed {costs_path}: {len(added)} added, {len(removed)} removed, {len(moved)} moved "
          f"by more than 2x; commit it with your change")


if __name__ == "__main__":
    commands = {"select-fast": (select_fast, 2), "refresh": (refresh, 3)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) != 2 + commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
