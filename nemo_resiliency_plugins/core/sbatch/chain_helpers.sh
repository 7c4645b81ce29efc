# nemo-resiliency-plugins: chaining helpers
# shellcheck shell=bash
# nrp_trap_of SIG: the command of the trap already set for SIG (empty if none), from `trap -p` (shell-quoted).
nrp_trap_of() {
  local nrp_t
  nrp_t=$(trap -p "$1")
  [ -n "$nrp_t" ] || return 0
  nrp_t=${nrp_t#trap -- }
  nrp_t=${nrp_t% *}
  eval "printf '%s' $nrp_t"
}
# nrp_keep_function NAME VAR: if a shell function NAME is defined (the user's, or an earlier block's), keep it as
# nrp_kept_VAR and set VAR to that name; otherwise set VAR to "command NAME" (the program). Named after VAR, so
# two blocks that both wrap NAME keep different functions. (Not in $(...): a subshell would lose it.)
nrp_keep_function() {
  if declare -F "$1" >/dev/null; then
    eval "nrp_kept_$2() $(declare -f "$1" | tail -n +2)"
    printf -v "$2" 'nrp_kept_%s' "$2"
  else
    printf -v "$2" 'command %s' "$1"
  fi
}
