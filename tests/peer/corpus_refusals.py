#!/usr/bin/env python3
"""tests/peer/corpus_refusals.py: checks, with DeepSpeed itself, every corpus file the corpus test classes as
"DeepSpeed refuses it too" (Note [Corpus share] in tests/cli/deepspeed_corpus_test.cpp).

Usage: corpus_refusals.py TEST_DEEPSPEED_CORPUS CORPUS_DIR
Runs the corpus test's share case, reads its "SCOPE<TAB>DeepSpeed refuses it too (REASON)<TAB>FILE" lines, and
for each file asks DeepSpeed (the venv's, 0.19.8) to read it the way deepspeed.initialize does: DeepSpeedConfig,
then the engine's optimizer-parameter check. The file passes when DeepSpeed raises, with the text REASON's row
of EXPECT names. Exit 0: all refused as claimed; 1: a claim DeepSpeed does not bear out; 77: no DeepSpeed.
"""
import os
import re
import subprocess
import sys
import types
import warnings

# REASON (the corpus test's wording) -> a part of DeepSpeed's message, or None for "raises, whatever it says"
# (a template's placeholders fail somewhere in DeepSpeed's arithmetic, not in one check).
EXPECT = {
    "no batch size": "train_batch_size or train_micro_batch_size_per_gpu",
    "a template that a script fills in": None,
    "DeepSpeed's fp16 table forbids other keys": "DeepSpeedFP16Config",
    "DeepSpeed raises on optimizer.params.max_grad_norm": "'max_grad_norm' is not supported",
    "a feature DeepSpeed removed": "has been removed",
}


def deepspeed_refusal(path):
    """DeepSpeed's error text for the config file at path, or None when DeepSpeed takes it."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.engine import DeepSpeedEngine
    try:
        config = DeepSpeedConfig(path)
        # What deepspeed.initialize checks next, from the config alone: the optimizer's parameters
        # (DeepSpeedEngine._configure_basic_optimizer raises before it builds anything).
        if config.optimizer_name is not None:
            engine = types.SimpleNamespace(optimizer_params=lambda: config.optimizer_params,
                                           optimizer_name=lambda: config.optimizer_name)
            try:
                DeepSpeedEngine._configure_basic_optimizer(engine, [])
            except AttributeError:
                pass  # got past the parameter checks to building the optimizer: accepted
    except Exception as error:  # DeepSpeed raises several types (DeepSpeedConfigError, AssertionError, ...)
        return f"{type(error).__name__}: {error}".replace("\n", " ")
    return None


def main():
    test_binary, corpus = sys.argv[1], sys.argv[2]
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    warnings.filterwarnings("ignore")
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        print("skipped: DeepSpeed is not in this venv; bench/vs_deepspeed/README.md gives the install command")
        return 77
    out = subprocess.run([test_binary, "--gtest_filter=DeepSpeedCorpus.ShareOfInScopeConfigsAcceptedStaysAboveItsFloor"],
                         capture_output=True, text=True).stdout
    claims = re.findall(r"^SCOPE\tDeepSpeed refuses it too \((.*)\)\t(.*)$", out, re.MULTILINE)
    if not claims:
        print("the corpus test printed no \"DeepSpeed refuses it too\" line:\n" + out[-2000:])
        return 1
    failures = 0
    for reason, name in claims:
        if reason not in EXPECT:
            print(f"FAIL {name}: no DeepSpeed check for the reason '{reason}'; add it to EXPECT")
            failures += 1
            continue
        refusal = deepspeed_refusal(os.path.join(corpus, name))
        expected = EXPECT[reason]
        if refusal is None or (expected is not None and expected not in refusal):
            print(f"FAIL {name}: zhost says DeepSpeed refuses it ({reason}); DeepSpeed "
                  + ("accepts it" if refusal is None else f"says: {refusal[:200]}"))
            failures += 1
        else:
            print(f"ok   {name}: {reason}; DeepSpeed: {refusal[:120]}")
    print(f"{len(claims) - failures} of {len(claims)} refusals zhost attributes to DeepSpeed too are DeepSpeed's")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
