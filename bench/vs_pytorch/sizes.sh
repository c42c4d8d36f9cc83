# bench/vs_pytorch/sizes.sh: the models this bench trains, sourced by run.sh and compare_builds.sh.
# name -> layers width heads seq_len micro-batch (a gpt with vocab 256, gpt.toml)
declare -A sizes=([3m]="4 256 8 128 8" [30m]="10 512 8 128 4")
