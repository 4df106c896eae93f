# bash completion for pagelock(1): its commands, each command's options,
# the values of --mode and --format, trace files and directories for report
# and compare, and for run the program, then the program's own completion.
# Installed as share/bash-completion/completions/pagelock; to try it from a
# checkout: source completion/pagelock.bash
# The option lists are reporter/cli/help.c's (tests/cli/completion.sh checks
# them against `pagelock CMD --help`).

_pagelock_opts() {
  case $1 in
  run) echo "-m --mode -o --output --max-blocked -h --help" ;;
  report) echo "-f --format -o --output --max-blocked -h --help" ;;
  compare) echo "-f --format --fail-if-worse -h --help" ;;
  demo) echo "-m --mode -o --output --quick -h --help" ;;
  doctor) echo "-h --help" ;;
  esac
}

# Whether option $2 of command $1 takes a value in the next word.
_pagelock_takes_value() {
  case $2 in
  -m | --mode | -o | --output | -f | --format | --max-blocked | --fail-if-worse) return 0 ;;
  esac
  return 1
}

# Trace files and directories (a directory stands for its *.trace files).
_pagelock_traces() {
  local IFS=$'\n'
  compopt -o filenames 2>/dev/null
  COMPREPLY=($(compgen -d -- "$1") $(compgen -f -X '!*.trace' -- "$1"))
}

_pagelock() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
  local cmd=${COMP_WORDS[1]} opt= i
  COMPREPLY=()
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "run report compare demo doctor help --help --version" -- "$cur"))
    return
  fi
  [[ $cmd == help ]] && {
    [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "run report compare demo doctor" -- "$cur"))
    return
  }

  # run: options end at the program's name; after it, the program's words.
  if [[ $cmd == run ]]; then
    i=2
    while [[ $i -lt $COMP_CWORD ]]; do
      local w=${COMP_WORDS[i]}
      if [[ $w == -- ]]; then
        i=$((i + 1))
        break
      elif [[ ${COMP_WORDS[i + 1]} == = ]]; then
        i=$((i + 3)) # --mode = auto, split at '=' by COMP_WORDBREAKS
      elif [[ $w == -* ]]; then
        _pagelock_takes_value run "$w" && [[ $w != *=* ]] && i=$((i + 1))
        i=$((i + 1))
      else
        break
      fi
    done
    if [[ $i -lt $COMP_CWORD ]]; then
      if declare -F _command_offset >/dev/null; then
        _command_offset "$i"
      else
        compopt -o default 2>/dev/null
      fi
      return
    fi
  fi

  # The value of an option: "--mode auto", "--mode=auto" (one word, or
  # three where COMP_WORDBREAKS splits at '='), "-mauto" is left alone.
  if [[ $cur == = ]]; then
    opt=$prev
    cur=
  elif [[ $prev == = ]]; then
    opt=${COMP_WORDS[COMP_CWORD - 2]}
  elif [[ $cur == --*=* ]]; then
    opt=${cur%%=*}
    cur=${cur#*=}
  elif _pagelock_takes_value "$cmd" "$prev"; then
    opt=$prev
  fi
  case $opt in
  -m | --mode)
    COMPREPLY=($(compgen -W "observe stage register auto off" -- "$cur"))
    return
    ;;
  -f | --format)
    if [[ $cmd == compare ]]; then
      COMPREPLY=($(compgen -W "text json" -- "$cur"))
    else
      COMPREPLY=($(compgen -W "text json html chrome" -- "$cur"))
    fi
    return
    ;;
  -o | --output)
    compopt -o filenames 2>/dev/null
    COMPREPLY=($(compgen -f -- "$cur"))
    return
    ;;
  --max-blocked | --fail-if-worse) return ;;
  esac

  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_pagelock_opts "$cmd")" -- "$cur"))
    return
  fi
  case $cmd in
  report | compare) _pagelock_traces "$cur" ;;
  run | doctor)
    compopt -o filenames 2>/dev/null
    COMPREPLY=($(compgen -c -- "$cur") $(compgen -f -- "$cur"))
    ;;
  esac
}
complete -F _pagelock pagelock
