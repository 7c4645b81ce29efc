# nemo-resiliency-plugins: launcher args
# shellcheck shell=bash
# FaultTolerancePlugin(launcher_args=...): ft_launcher flags that NeMo-Run's FaultTolerance launcher cannot write.
# The plugin sets NRP_FT_LAUNCHER_ARGS (the line above this block: plain words, checked against the installed NVRx's
# parser); this function stands in for srun and puts them right after the first ft_launcher word of its arguments,
# ahead of NeMo-Run's own flags and of the training script (after it they would be the script's arguments). Another
# srun call (no ft_launcher word) runs as it is.
nrp_keep_function srun NRP_SRUN_LAUNCHER_ARGS
srun() {
  local nrp_arg nrp_added=0
  local -a nrp_args=()
  for nrp_arg in "$@"; do
    nrp_args+=("$nrp_arg")
    if [ "$nrp_added" = 0 ]; then
      case "$nrp_arg" in
        ft_launcher|*/ft_launcher) nrp_args+=("${NRP_FT_LAUNCHER_ARGS[@]}"); nrp_added=1 ;;
      esac
    fi
  done
  $NRP_SRUN_LAUNCHER_ARGS "${nrp_args[@]}"
}
