#!/usr/bin/env python3
"""tests/abi/abi_shape.py: checks of the C ABI's shape that the compiler does not make, read from the headers.

  calls   every function of every ABI table takes its handle and one args struct (docs/abi.md "One args struct
          per call"); the storage and optimizer tables are separate; nothing of the pre-1.0 ABI is left
  history docs/abi.md's version history, core.h's version, the frozen header folders (tests/abi/frozen) and
          their README agree, and the headers of the current version equal its frozen copy byte for byte (a
          header change needs a new minor)

Usage: abi_shape.py calls|history PROJECT_ROOT. Prints what is wrong, one line each, and exits 1; else 0.
"""
import filecmp
import pathlib
import re
import sys

# Calls that never grow, so take no args struct (docs/abi.md "One args struct per call"): the status functions
# and the clock (the foundation every other call uses), destroy (nothing to say but the instance) and two
# handle-only queries read on hot paths.
EXEMPT = {"status_create", "status_code", "status_message", "status_destroy", "clock_ns", "destroy",
          "abort_requested", "device_memory_is_separate"}
HANDLES = {"zhost_plugin_instance*", "zhost_host_context*", "void*"}
# Callback types the caller supplies with its own `user` pointer (byte streams, the entry itself).
CALLBACK_TYPES = {"zhost_state_writer", "zhost_state_reader", "zhost_plugin_entry_v1_fn"}


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", "", re.sub(r"//[^\n]*", "", text, flags=re.S), flags=re.S)


def param_type(param):
    """'const zhost_tier_step_args* args' -> 'zhost_tier_step_args*'."""
    words = param.replace("*", " * ").split()
    words = [w for w in words if w not in ("const", "struct")]
    if len(words) >= 2 and words[-1] != "*":
        words = words[:-1]  # the parameter's name
    return "".join(words)


def check_calls(root):
    problems = []
    headers = sorted((root / "sdk/include/zhost").glob("*.h"))
    text = "\n".join(strip_comments(h.read_text()) for h in headers)
    structs = {}  # name -> body
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} \1;", text, flags=re.S):
        structs[m.group(1)] = m.group(2)
    args_structs = {name for name, body in structs.items() if re.match(r"\s*size_t struct_size;", body)}
    calls = 0
    for name, body in structs.items():
        for fn in re.finditer(r"\(\*(\w+)\)\(([^;]*?)\);", body, flags=re.S):
            member, params = fn.group(1), [p.strip() for p in fn.group(2).split(",") if p.strip()]
            calls += 1
            where = f"{name}.{member}"
            if member in EXEMPT:
                continue
            types = [param_type(p) for p in params]
            if len(types) == 2 and types[0] in HANDLES:
                types = types[1:]
            if len(types) != 1 or not types[0].endswith("*") or types[0][:-1] not in args_structs:
                problems.append(f"{where}({', '.join(params)}): takes no single args struct after its handle")
    for m in re.finditer(r"typedef [^;]*?\(\*(\w+)\)\(", text):
        if m.group(1) not in CALLBACK_TYPES:
            problems.append(f"function type {m.group(1)}: not a known callback type (add it, with a reason)")
    if calls < 60:
        problems.append(f"found only {calls} ABI calls in the headers: the parser no longer sees them")
    if "zhost_offload_api" in text:
        problems.append("zhost_offload_api still exists: storage and optimizer tables are separate in 1.0")
    for table, foreign in (("zhost_storage_api", ("setup", "step", "grad")),
                           ("zhost_optimizer_tier_api", ("store", "load", "wait"))):
        members = set(re.findall(r"\(\*(\w+)\)", structs.get(table, "")))
        if not members:
            problems.append(f"{table} is missing")
        for member in foreign:
            if member in members:
                problems.append(f"{table} has {member}: that belongs to the other role's table")
    raw = "\n".join(h.read_text() for h in headers)
    for name in sorted(args_structs):
        if not re.search(rf"^ZHOST_ASSERT_STRUCT_COMPLETE\({name}, ", raw, flags=re.M):
            problems.append(f"{name}: no ZHOST_ASSERT_STRUCT_COMPLETE line of its own (its _SIZE macro goes unchecked)")
        if not re.search(rf"^#define ZHOST_\w+_MIN_SIZE .*/\* since \d+\.\d+ \*/$", raw, flags=re.M):
            problems.append("no _MIN_SIZE macro says which version introduced its struct")
    if re.search(r"_SIZE_0_\d+", text):
        problems.append("a pre-1.0 *_SIZE_0_N macro is left in the headers")
    return problems


def header_version(root):
    core = (root / "sdk/include/zhost/core.h").read_text()
    major = int(re.search(r"#define ZHOST_ABI_MAJOR (\d+)", core).group(1))
    minor = int(re.search(r"#define ZHOST_ABI_MINOR (\d+)", core).group(1))
    return major, minor


def check_history(root):
    problems = []
    abi_md = (root / "docs/abi.md").read_text()
    section = re.search(r"^### Version history\n(.*?)(?=^#)", abi_md, flags=re.S | re.M)
    if not section:
        return ["docs/abi.md has no '### Version history' section"]
    versions = [(int(a), int(b)) for a, b in re.findall(r"^\| (\d+)\.(\d+) \|", section.group(1), flags=re.M)]
    current = header_version(root)
    if not versions:
        problems.append("docs/abi.md's version history lists no version")
    elif versions[-1] != current:
        problems.append(f"docs/abi.md's version history ends at {versions[-1][0]}.{versions[-1][1]}, "
                        f"core.h says {current[0]}.{current[1]}")
    if versions != sorted(set(versions)):
        problems.append("docs/abi.md's version history is not in order, or lists a version twice")
    if f"The current ABI is **{current[0]}.{current[1]}**" not in abi_md:
        problems.append(f"docs/abi.md does not say 'The current ABI is **{current[0]}.{current[1]}**'")
    frozen = root / "tests/abi/frozen"
    folders = sorted(p.name for p in frozen.iterdir() if p.is_dir())
    wanted = [f"v{a}_{b}" for a, b in versions]
    if folders != wanted:
        problems.append(f"tests/abi/frozen has {folders}, the history lists {wanted}: freeze each release once")
    readme_rows = re.findall(r"^\| (v\d+_\d+) \|", (frozen / "README.md").read_text(), flags=re.M)
    if readme_rows != folders:
        problems.append(f"tests/abi/frozen/README.md lists {readme_rows}, the folder holds {folders}")
    newest = frozen / f"v{current[0]}_{current[1]}" / "zhost"
    if newest.is_dir():
        live = root / "sdk/include/zhost"
        names = sorted(p.name for p in live.glob("*.h"))
        if names != sorted(p.name for p in newest.glob("*.h")):
            problems.append(f"{newest} does not hold the same headers as sdk/include/zhost")
        for name in names:
            if (newest / name).exists() and not filecmp.cmp(live / name, newest / name, shallow=False):
                problems.append(f"sdk/include/zhost/{name} differs from its frozen copy of {current[0]}."
                                f"{current[1]}: a released ABI never changes; bump ZHOST_ABI_MINOR, append, and "
                                "freeze the new minor (docs/abi.md \"Versioning rule\")")
    return problems


def main():
    mode, root = sys.argv[1], pathlib.Path(sys.argv[2])
    problems = check_calls(root) if mode == "calls" else check_history(root)
    for p in problems:
        print(p)
    print(f"{mode}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
