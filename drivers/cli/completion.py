"""`tarry completion bash|zsh|fish`: a shell completion script made from the command's own
parser, so it offers every command and option there is (and the choices of those that have
them) without a copy to keep in step.

argparse keeps what it parses in private attributes (`_actions`, `_SubParsersAction`,
`_choices_actions`); reading them is what completion generators (argcomplete, shtab) do, and it
is kept to `_commands` below.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

SHELLS = ("bash", "zsh", "fish")


class Option(NamedTuple):
    names: tuple[str, ...]  # "-f", "--follow"
    help: str
    takes_value: bool
    choices: tuple[str, ...]


class Command(NamedTuple):
    name: str  # "run"; a sub-command's has its command's first: "mail ls"
    help: str
    options: tuple[Option, ...]
    #: Words its positionals take from a fixed set: sub-commands (`db upgrade`) or choices.
    words: tuple[str, ...]
    #: Its sub-commands (`mail ls`, `mail discard`), each with its own options.
    subcommands: tuple[Command, ...] = ()


def completion(args: argparse.Namespace) -> int:
    """`tarry completion SHELL`: the parser that read the arguments hands itself over in
    `args.parser` (set as a default by parser.py), so this module needs no import of it."""
    print(script(args.shell, args.parser), end="")
    return 0


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for `shell` of `parser`'s commands."""
    top, commands = _commands(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](top, commands)


def _commands(parser: argparse.ArgumentParser) -> tuple[Command, list[Command]]:
    """The top level (its options) and each command, in the parser's order."""
    top = _command("", parser, parser.description or "")
    return top._replace(subcommands=()), list(top.subcommands)


def _command(name: str, parser: argparse.ArgumentParser, help: str) -> Command:
    options: list[Option] = []
    words: list[str] = []
    subcommands: list[Command] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for word, sub in action.choices.items():
                full = f"{name} {word}" if name else word
                subcommands.append(_command(full, sub, helps.get(word, "")))
            if name:  # `db upgrade`: the words after the command (the top's are the commands)
                words.extend(action.choices)
        elif not action.option_strings:
            words.extend(str(c) for c in action.choices or ())
        elif action.help != argparse.SUPPRESS:
            options.append(
                Option(
                    tuple(action.option_strings),
                    action.help or "",
                    action.nargs != 0,
                    tuple(str(c) for c in action.choices or ()),
                )
            )
    return Command(name, help, tuple(options), tuple(words), tuple(subcommands))


def _names(options: tuple[Option, ...]) -> str:
    return " ".join(n for o in options for n in o.names)


def _valued(options: tuple[Option, ...]) -> str:
    """`--a|--b` of the options that take a value, for a shell `case` pattern."""
    return "|".join(n for o in options if o.takes_value for n in o.names)


def _every(commands: list[Command]) -> list[Command]:
    """Each command, followed by its sub-commands."""
    return [c for command in commands for c in (command, *command.subcommands)]


def _parents(commands: list[Command]) -> str:
    """`db|mail`: the commands that have sub-commands, for a shell `case` pattern."""
    return "|".join(c.name for c in commands if c.subcommands)


# --- bash ------------------------------------------------------------------------------------


def _bash(top: Command, commands: list[Command]) -> str:
    cases = []
    for c in _every(commands):
        choices = "".join(
            f'                {"|".join(o.names)}) COMPREPLY=($(compgen -W "{" ".join(o.choices)}" '
            f'-- "$cur")); return 0 ;;\n'
            for o in c.options
            if o.choices
        )
        valued = _valued(tuple(o for o in c.options if not o.choices))
        free = f"                {valued}) return 0 ;;  # a value: files\n" if valued else ""
        cases.append(
            f'        "{c.name}")\n'
            f'            case "$prev" in\n{choices}{free}            esac\n'
            f'            words="{_names(c.options)} {" ".join(c.words)}" ;;\n'
        )
    # The command is the first word that is not an option; a command with sub-commands
    # (`mail ls`) takes the next one too.
    found = 'cmd="${COMP_WORDS[i]}"; break ;;'
    if _parents(commands):
        found = (
            'if [[ -n "$cmd" ]]; then cmd="$cmd ${COMP_WORDS[i]}"; break; fi\n'
            '               cmd="${COMP_WORDS[i]}"\n'
            f'               case "$cmd" in {_parents(commands)}) ;; *) break ;; esac ;;'
        )
    return f"""# bash completion for tarry: `source <(tarry completion bash)`, e.g. in ~/.bashrc
_tarry() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local cmd="" words="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            {_valued(top.options)}) ((i++)) ;;
            -*) ;;
            *) {found}
        esac
    done
    case "$cmd" in
        "")
            case "$prev" in
                {_valued(top.options)}) return 0 ;;
            esac
            words="{_names(top.options)} {" ".join(c.name for c in commands)}" ;;
{"".join(cases)}    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _tarry tarry
"""


# --- zsh -------------------------------------------------------------------------------------


def _zq(text: str) -> str:
    """`text` single-quoted for zsh."""
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh(top: Command, commands: list[Command]) -> str:
    described = "\n".join(f"    {_zq(c.name + ':' + c.help)}" for c in commands)
    cases = []
    for c in _every(commands):
        choices = "".join(
            f"        {'|'.join(o.names)}) compadd -- {' '.join(o.choices)}; return ;;\n"
            for o in c.options
            if o.choices
        )
        valued = _valued(tuple(o for o in c.options if not o.choices))
        free = f"        {valued}) _files; return ;;\n" if valued else ""
        rest = f"compadd -- {' '.join(c.words)}" if c.words else "_files"
        cases.append(
            f"    {_zq(c.name)})\n"
            f"      case $prev in\n{choices}{free}      esac\n"
            f"      if [[ $cur == -* ]]; then compadd -- {_names(c.options)}; "
            f"else {rest}; fi ;;\n"
        )
    # As in bash: a command with sub-commands (`mail ls`) takes the next word too.
    found = "cmd=${words[i]}; break ;;"
    if _parents(commands):
        found = (
            'if [[ -n $cmd ]]; then cmd="$cmd ${words[i]}"; break; fi\n'
            "         cmd=${words[i]}\n"
            f"         case $cmd in {_parents(commands)}) ;; *) break ;; esac ;;"
        )
    return f"""#compdef tarry
# zsh completion for tarry: `source <(tarry completion zsh)` after compinit (e.g. in ~/.zshrc),
# or save it as _tarry in a folder of $fpath.
_tarry() {{
  local -a commands
  commands=(
{described}
  )
  local cmd="" cur=${{words[CURRENT]}} prev=${{words[CURRENT-1]}} i
  for (( i = 2; i < CURRENT; i++ )); do
    case ${{words[i]}} in
      {_valued(top.options)}) (( i++ )) ;;
      -*) ;;
      *) {found}
    esac
  done
  case $cmd in
    "")
      case $prev in
        {_valued(top.options)}) _files; return ;;
      esac
      if [[ $cur == -* ]]; then compadd -- {_names(top.options)}
      else _describe -t commands 'tarry command' commands; fi ;;
{"".join(cases)}  esac
}}
if [[ $funcstack[1] == _tarry ]]; then _tarry "$@"; else compdef _tarry tarry; fi
"""


# --- fish ------------------------------------------------------------------------------------


def _fq(text: str) -> str:
    """`text` single-quoted for fish."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_option(condition: str, option: Option) -> str:
    spec = []
    for name in option.names:
        spec.append(f"-l {name[2:]}" if name.startswith("--") else f"-s {name[1:]}")
    if option.choices:
        spec.append(f"-x -a {_fq(' '.join(option.choices))}")
    elif option.takes_value:
        spec.append("-r -F")
    return f"complete -c tarry -n {_fq(condition)} {' '.join(spec)} -d {_fq(option.help)}"


def _fish(top: Command, commands: list[Command]) -> str:
    lines = [
        "# fish completion for tarry: `tarry completion fish > ~/.config/fish/completions/tarry.fish`",
        "complete -c tarry -f",
    ]
    lines += [_fish_option("__fish_use_subcommand", o) for o in top.options]
    lines += [
        f"complete -c tarry -n __fish_use_subcommand -a {c.name} -d {_fq(c.help)}" for c in commands
    ]
    # A sub-command's name may be a command's too (`mail ls`, `ls`): each is told apart by
    # the command seen before it.
    nested = {s.name.split()[-1] for c in commands for s in c.subcommands}
    parents = " ".join(c.name for c in commands if c.subcommands)
    for c in _every(commands):
        *above, word = c.name.split()
        condition = f"__fish_seen_subcommand_from {word}"
        if above:
            condition = f"__fish_seen_subcommand_from {above[0]}; and {condition}"
        elif word in nested:
            condition += f"; and not __fish_seen_subcommand_from {parents}"
        lines += [_fish_option(condition, o) for o in c.options]
        if c.words:
            if c.subcommands:  # offered until one is given
                condition += f"; and not __fish_seen_subcommand_from {' '.join(c.words)}"
            lines.append(f"complete -c tarry -n {_fq(condition)} -a {_fq(' '.join(c.words))}")
    return "\n".join(lines) + "\n"
