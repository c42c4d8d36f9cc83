# bench/machine.sh: sourced by the benchmarks' run.sh. describe_machine ZHOST COMMAND writes what a result
# depends on (date, CPU, zhost build, the command with its settings, the load average at start) to stdout,
# for RESULTS_DIR/machine.txt.
describe_machine() {
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), nproc $(nproc)"
  echo "zhost: $("$1" version | tr '\n' ';' | sed 's/;$//')"
  echo "command: $2"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}
