# host/cli/report.py: `zhost report RUN_DIR [RUN_DIR...] OUTPUT`, run by /usr/bin/python3 with the script on
# stdin (the zhost executable carries it). Reads what runs left in their directories (metrics.jsonl,
# steps.rankN.jsonl, model_states.json, config.toml, comms.rankN.json) and writes one self-contained HTML
# page: matplotlib figures embedded as PNG data URIs, tables, and a check that the browser decoded every
# figure and found it not blank (docs/profiling.md).
import base64
import glob
import html
import io
import json
import os
import statistics
import sys
import tomllib

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches
    import matplotlib.pyplot as plt
except ImportError:
    sys.stderr.write("zhost: error: zhost report needs python3-matplotlib; install it (scripts/setup-deps does)\n")
    sys.exit(2)

CATEGORIES = ["params", "grads", "master", "optimizer", "buffers", "gather_window", "pinned", "tier_host",
              "tier_nvme", "activations", "checkpoints_host"]
PHASES = [("forward_ms", "forward"), ("backward_ms", "backward"), ("reduction_ms", "gradient reduction"),
          ("step_ms", "optimizer step")]
MB = 1048576.0


def read_jsonl(path):
    records = []
    if not os.path.exists(path):
        return records
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass  # a line cut short by a run that died
    return records


def read_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


class Run:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(os.path.normpath(path))
        self.metrics = read_jsonl(os.path.join(path, "metrics.jsonl"))
        self.ranks = {}
        for f in sorted(glob.glob(os.path.join(path, "steps.rank*.jsonl"))):
            rank = int(os.path.basename(f)[len("steps.rank"):-len(".jsonl")])
            self.ranks[rank] = read_jsonl(f)
        self.states = read_json(os.path.join(path, "model_states.json"))
        self.comms = read_json(os.path.join(path, "comms.rank0.json"))
        self.swaps = read_jsonl(os.path.join(path, "swaps.jsonl"))  # Note [Storage swap]
        self.micro_batches = 1
        config = os.path.join(path, "config.toml")
        if os.path.exists(config):
            with open(config, "rb") as f:
                self.micro_batches = tomllib.load(f).get("gradient_accumulation_steps", 1)
        self.log_status = None
        log = os.path.join(path, "run.log")
        if os.path.exists(log):
            with open(log, errors="replace") as f:
                for line in f:
                    if "status: " in line:
                        self.log_status = line.split("status: ", 1)[1].strip()
        if not self.metrics:
            raise SystemExit("zhost: error: %s has no metrics.jsonl records; give the folder a run wrote" % path)

    def label(self):
        s = self.states or {}
        return "%s (stage %s, %s rank(s))" % (self.name, s.get("stage", "?"), s.get("world_size", len(self.ranks)))


def figure_uri(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def series(records, key):
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)):
            xs.append(r["step"])
            ys.append(v)
    return xs, ys


def plot_training(runs):
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for ax, (key, title) in zip(axes, [("loss", "loss"), ("lr", "learning rate"), ("grad_norm", "gradient norm")]):
        for run in runs:
            ax.plot(*series(run.metrics, key), label=run.name)
        ax.set_title(title)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=8)
    return figure_uri(fig)


def plot_throughput(runs):
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for run in runs:
        axes[0].plot(*series(run.metrics, "tokens_per_s"), label=run.name)
        axes[1].plot(*series(run.metrics, "tflops"), label=run.name)
        steps, mfu = series(run.metrics, "mfu")
        axes[2].plot(steps, [100 * m for m in mfu], label=run.name)
    axes[0].set_title("tokens/s (all ranks)")
    axes[1].set_title("model TFLOP/s (all ranks)")
    axes[2].set_title("MFU % (of run.peak_tflops or the measured matmul rate)")
    for ax in axes:
        ax.set_xlabel("step")
    axes[0].legend(fontsize=8)
    return figure_uri(fig)


def mean_after_first(records, key):
    values = [r.get(key, 0) or 0 for r in records[1:]] or [r.get(key, 0) or 0 for r in records]
    return sum(values) / max(len(values), 1)


def plot_breakdown(run):
    ranks = sorted(run.ranks)
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    bottom = [0.0] * len(ranks)
    for key, label in PHASES:
        # forward/backward/reduction are per micro-batch: times the micro-batches of a step
        per_step = 1 if key == "step_ms" else run.micro_batches
        values = [mean_after_first(run.ranks[r], key) * per_step for r in ranks]
        ax.bar([str(r) for r in ranks], values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    totals = [mean_after_first(run.ranks[r], "step_time_ms") for r in ranks]
    other = [max(t - b, 0) for t, b in zip(totals, bottom)]
    ax.bar([str(r) for r in ranks], other, bottom=bottom, label="other (data, loss all-reduce, telemetry)")
    ax.set_xlabel("rank")
    ax.set_ylabel("ms per step (mean, first step left out)")
    ax.set_title("time per phase: %s" % run.name)
    ax.legend(fontsize=7, loc="lower right")
    return figure_uri(fig)


def formula_total(run):
    if not run.states:
        return None
    f = run.states["formula"]
    return sum(f.get(k, 0) for k in ("params", "grads", "master", "optimizer"))


def plot_memory(run):
    ranks = sorted(run.ranks)
    fig, axes = plt.subplots(1, len(ranks), figsize=(7 * len(ranks), 3.6), squeeze=False)
    total = formula_total(run)
    for ax, rank in zip(axes[0], ranks):
        records = run.ranks[rank]
        steps = [r["step"] for r in records]
        present = [c for c in CATEGORIES if any(r["memory"].get(c, 0) for r in records)]
        ax.stackplot(steps, [[r["memory"].get(c, 0) / MB for r in records] for c in present], labels=present)
        if total:
            ax.axhline(total / MB, color="r", linestyle="--", label="ZeRO formula (model states)")
        ax.set_title("memory by category, rank %d: %s" % (rank, run.name))
        ax.set_xlabel("step")
        ax.set_ylabel("MB (stacked categories)")
        ax.legend(fontsize=7, loc="upper left")
        # the process's RSS holds LibTorch itself besides the categories: on its own axis
        rss_axis = ax.twinx()
        rss_axis.plot(steps, [r["memory"].get("rss", 0) / MB for r in records], "k-", label="process RSS")
        rss_axis.set_ylabel("RSS MB")
        rss_axis.ticklabel_format(axis="y", useOffset=False)
        rss_axis.legend(fontsize=7, loc="upper right")
    return figure_uri(fig)


def comm_theory(run):
    """Bytes per step and rank that ZeRO's analysis predicts: 2Ψ(w-1)/w (stages 0-2), 3Ψ(w-1)/w (stage 3)."""
    s = run.states
    if not s or s["world_size"] < 2:
        return None
    factor = 3 if s["stage"] == 3 else 2
    return factor * s["num_params"] * s.get("compute_bytes", 4) * (s["world_size"] - 1) / s["world_size"]


def plot_comm(runs):
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    names, measured, theory = [], [], []
    for run in runs:
        names.append(run.name)
        measured.append(mean_after_first(run.metrics, "comm_bytes_sent") / MB)
        t = comm_theory(run)
        theory.append(t / MB if t else 0)
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], measured, width=0.4, label="measured (rank 0, sent per step)")
    ax.bar([x + 0.2 for x in xs], theory, width=0.4, label="ZeRO theory: 2Ψ or 3Ψ x (w-1)/w")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel("MB per step")
    ax.set_title("communication volume vs ZeRO's theory")
    ax.legend(fontsize=7)
    return figure_uri(fig)


def plot_waits(run):
    keys = sorted({k for recs in run.ranks.values() for r in recs for k in r if "/" in k and k.endswith("_ms")})
    if not keys:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for rank in sorted(run.ranks):
        for key in keys:
            ax.plot(*series(run.ranks[rank], key), label="rank %d %s" % (rank, key[:-3]))
    ax.set_title("plugin spans (copy and gather waits, tier steps): %s" % run.name)
    ax.set_xlabel("step")
    ax.set_ylabel("ms per step")
    ax.legend(fontsize=7)
    return figure_uri(fig)


COLOURS = {"step": "#c7c7c7", "forward": "#1f77b4", "backward": "#ff7f0e", "hook": "#2ca02c", "optimizer": "#d62728",
           "collective": "#9467bd", "copy": "#8c564b", "plugin": "#e377c2"}


def read_trace_events(path):
    """The events of a zhost trace (one per line after the header), tolerating a file cut short."""
    events = []
    with open(path) as f:
        next(f, None)
        for line in f:
            line = line.strip().rstrip(",")
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
    return events


def plot_trace_step(run):
    """The last step of rank 0's trace as a timeline: one row per track and nesting depth."""
    path = os.path.join(run.path, "trace.rank0.json")
    if not os.path.exists(path):
        return None
    events = [e for e in read_trace_events(path) if e.get("ph") == "X"]
    steps = [e for e in events if e.get("cat") == "step" and e["name"] == "step"]
    if not steps:
        return None
    last = steps[-1]
    begin, end = last["ts"], last["ts"] + last["dur"]
    inside = sorted((e for e in events if begin <= e["ts"] <= end), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    rows, open_spans = {}, {}
    for e in inside:
        stack = open_spans.setdefault(e["tid"], [])
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        rows.setdefault((e["tid"], len(stack)), []).append(e)
        stack.append(e["ts"] + e["dur"])
    keys = sorted(rows)
    fig, ax = plt.subplots(figsize=(13, 0.32 * len(keys) + 1.2))
    for y, key in enumerate(keys):
        for e in rows[key]:
            ax.broken_barh([((e["ts"] - begin) / 1000, max(e["dur"], 1) / 1000)], (y - 0.4, 0.8),
                           color=COLOURS.get(e.get("cat"), "#7f7f7f"))
            if e["dur"] > 0.06 * (end - begin):
                ax.text((e["ts"] - begin + e["dur"] / 2) / 1000, y, e["name"], ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(["%s depth %d" % ("main" if tid == 0 else "collectives %d" % (tid - 100) if tid >= 100
                                          else "thread %d" % tid, depth) for tid, depth in keys], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the start of step %d" % last["args"]["step"])
    ax.set_title("rank 0, last step of the trace: %s" % run.name)
    ax.legend(handles=[matplotlib.patches.Patch(color=c, label=k) for k, c in COLOURS.items()], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure_uri(fig)


def summary_table(runs):
    rows = ["<tr><th>run</th><th>stage</th><th>ranks</th><th>steps</th><th>final loss</th><th>tokens/s</th><th>MFU</th>"
            "<th>peak RSS rank 0 (MB)</th><th>model states measured/formula</th><th>status</th></tr>"]
    for run in runs:
        s = run.states or {}
        last = run.metrics[-1]
        rows.append("<tr>" + "".join("<td>%s</td>" % html.escape(str(v)) for v in [
            run.name, s.get("stage", "?"), s.get("world_size", "?"), last["step"],
            "%.4f" % last["loss"] if isinstance(last.get("loss"), float) else "-",
            "%.0f" % mean_after_first(run.metrics, "tokens_per_s"),
            "%.1f%%" % (100 * mean_after_first(run.metrics, "mfu"))
            if any("mfu" in r for r in run.metrics) else "-",  # runs from before MFU was recorded
            "%.0f" % last.get("peak_rss_mb", 0),
            "%.3f" % s["ratio"] if "ratio" in s else "-", run.log_status or "unknown (no run.log)"]) + "</tr>")
    return "<table>%s</table>" % "".join(rows)


def storage_of(record):
    """Where a step's offloaded states were (Note [Storage swap]): "cpu", "nvme / parameters: cpu", or ""."""
    storage = record.get("optimizer_storage", "")
    if record.get("param_storage"):
        storage += " / parameters: " + record["param_storage"]
    return storage


def plot_swaps(run):
    """Step time per step, coloured by storage, with the swaps marked: the figure a tier experiment is for."""
    records = [r for r in run.metrics if storage_of(r)]
    if not run.swaps and len({storage_of(r) for r in records}) < 2:
        return None
    fig, ax = plt.subplots(figsize=(13, 3.4))
    for storage in dict.fromkeys(storage_of(r) for r in records):
        steps = [r["step"] for r in records if storage_of(r) == storage]
        times = [r["step_time_ms"] for r in records if storage_of(r) == storage]
        ax.plot(steps, times, "o", markersize=4, label=storage)
    for w in run.swaps:
        ax.axvline(w["after_step"] + 0.5, color="green" if w.get("ok") else "red", linestyle="--", linewidth=1)
        ax.annotate("%s %s -> %s%s" % (w.get("role", "optimizer"), w["from"], w["to"], "" if w.get("ok") else " (failed)"),
                    (w["after_step"] + 0.5, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                    va="top", ha="right")
    ax.set_xlabel("step")
    ax.set_ylabel("step time (ms)")
    ax.legend(fontsize=8, title="optimizer storage", title_fontsize=8)
    return figure_uri(fig)


def storage_table(run):
    """Step time by where the optimizer's states were (Note [Storage swap]), and the swaps themselves."""
    by_storage = {}
    for r in run.metrics[1:]:  # the first step warms up
        storage = storage_of(r)
        if storage:
            by_storage.setdefault(storage, []).append(r["step_time_ms"])
    if not by_storage and not run.swaps:
        return ""
    rows = ["<tr><th>optimizer storage</th><th>steps</th><th>mean step time (ms)</th>"
            "<th>median step time (ms)</th></tr>"]
    for storage, times in by_storage.items():
        rows.append("<tr><td>%s</td><td>%d</td><td>%.1f</td><td>%.1f</td></tr>" % (
            html.escape(storage), len(times), statistics.mean(times), statistics.median(times)))
    swaps = ["<tr><th>after step</th><th>from</th><th>to</th><th>origin</th><th>what</th><th>MB</th>"
             "<th>seconds</th><th>GB/s</th><th>outcome</th></tr>"]
    for w in run.swaps:
        moved = w.get("bytes", 0)
        swaps.append("<tr>" + "".join("<td>%s</td>" % html.escape(str(v)) for v in [
            w["after_step"], w["from"], w["to"], w["origin"], w.get("role", "optimizer"), "%.1f" % (moved / 1e6), "%.3f" % w["seconds"],
            "%.2f" % (moved / 1e9 / w["seconds"]) if w.get("ok") and w["seconds"] > 0 else "-",
            "moved" if w.get("ok") else "stayed: " + w.get("error", "")]) + "</tr>")
    return "<h3>Step time by optimizer storage: %s</h3><table>%s</table><table>%s</table>" % (
        html.escape(run.name), "".join(rows), "".join(swaps) if run.swaps else "")


def comms_table(run):
    if not run.comms:
        return ""
    rows = ["<tr><th>op</th><th>message size</th><th>count</th><th>avg latency (ms)</th><th>algbw (GB/s)</th>"
            "<th>busbw (GB/s)</th></tr>"]
    for op in run.comms:
        rows.append("<tr><td>%s</td><td>%d</td><td>%d</td><td>%.3f</td><td>%.3f</td><td>%.3f</td></tr>" % (
            op["op"], op["message_bytes"], op["count"], op["avg_latency_ms"], op["algbw_avg_GBps"],
            op["busbw_avg_GBps"]))
    return "<h3>comms_logger, rank 0: %s</h3><table>%s</table>" % (html.escape(run.name), "".join(rows))


CHECK_SCRIPT = """
window.addEventListener('load', function () {
  var images = document.querySelectorAll('img.plot'), good = 0;
  images.forEach(function (img) {
    var c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    if (!c.width || !c.height) return;
    var g = c.getContext('2d'); g.drawImage(img, 0, 0);
    var d = g.getImageData(0, 0, c.width, c.height).data, ink = 0;
    for (var i = 0; i < d.length; i += 4) if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) ink++;
    if (ink > 0.01 * c.width * c.height) good++;
  });
  document.getElementById('plot-check').textContent = 'plots rendered: ' + good + '/' + images.length;
});
"""


def main():
    *dirs, output = sys.argv[1:]
    runs = [Run(d) for d in dirs]
    sections = []

    def figure(title, uri):
        if uri:
            sections.append('<h2>%s</h2><img class="plot" alt="%s" src="%s">' % (html.escape(title),
                                                                                html.escape(title), uri))

    figure("Training: loss, learning rate, gradient norm", plot_training(runs))
    figure("Throughput", plot_throughput(runs))
    figure("Communication volume", plot_comm(runs))
    for run in runs:
        figure("Time per phase per rank: " + run.name, plot_breakdown(run))
        figure("Memory by category over time: " + run.name, plot_memory(run))
        figure("Overlap: plugin waits: " + run.name, plot_waits(run))
        figure("Trace: one step on rank 0: " + run.name, plot_trace_step(run))
        figure("Tier swaps: step time by storage: " + run.name, plot_swaps(run))
        if run.comms:
            sections.append(comms_table(run))
        sections.append(storage_table(run))
    page = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>zhost report</title><style>
body{font-family:sans-serif;margin:20px;max-width:1400px} img{max-width:100%%;border:1px solid #ddd}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
</style><script>%s</script></head><body><h1>zhost report</h1><p id="plot-check">plots rendered: not checked</p>
<h2>Runs</h2>%s%s<p>Written by <code>zhost report</code> from %s.</p></body></html>""" % (
        CHECK_SCRIPT, summary_table(runs), "\n".join(sections), html.escape(", ".join(dirs)))
    with open(output, "w") as f:
        f.write(page)
    print("wrote %s: %d plot(s) of %d run(s)" % (output, sum(s.count('class="plot"') for s in sections), len(runs)))


main()
