// Package policy decides whether a shell command may run: it extracts every
// simple command a shell string would run, with a real shell parser, and
// matches each one against prefix rules read from files in the
// prefix_rule(...) language of the Codex CLI's exec policy.
//
// The package is an engine: plain values in and out, typed errors
// (*result.Error with the codes below), no flags, no output of its own. The
// CLIs wire it to --policy FILE, `agentsh check` and enforcement.
//
// # Extraction
//
// [Extract] parses a string as bash (mvdan.cc/sh/v3/syntax) and returns, in
// source order with an outer command before the commands nested in its words,
// every simple command it finds: both sides of && || ; and &, every pipeline
// stage, subshells and { } groups, the conditions and bodies of if, while,
// until, for, select and case, function bodies, $(...) and backticks wherever
// they appear (arguments, assignments, redirections, parameter expansions,
// arithmetic, [[ ]]), process substitutions, and command substitutions inside
// unquoted heredoc bodies (they run). Other heredoc text is data.
//
// Words are resolved statically, the way bash resolves them: quotes are
// removed, backslash escapes and $'...' escapes are decoded (a NUL ends a
// $'...' string, as in bash: $'git\0' is git), literal pieces are joined,
// and brace expansion is done (git {push,pull} is git push pull), so
// `"r"m`, `r""m`, `\rm` and `$'\x72m'` all give rm. A part that is only
// known at run time (a parameter expansion, a command or process
// substitution, arithmetic) is kept in the argument as its source text
// without quotes: `rm "$f"` gives [rm $f]. Such an argument, a glob (an
// unquoted * ? or [...]; a lone [ is the test command), the arguments xargs
// appends or puts in place of -I's string, and find's {} are words known
// only at run time: where a prompt or forbidden rule has a literal word at
// that position, the command could match it, and is reported unresolved
// with kind could_match.
//
// A wrapper yields itself and the command it runs, recursively: xargs, env
// (including env -S, split as GNU env splits it: quotes, \_ and \c, with
// ${NAME} known only at run time), sudo, doas, nice, ionice, timeout, nohup,
// stdbuf, time (keyword and program), command (not with -v/-V), exec,
// builtin, setsid, chroot, busybox, taskset, chrt, strace, prlimit, sshpass,
// flock, watch, su/runuser -c, sg and script -c; so do the dynamic loader
// run as a program (ld.so PROGRAM) and valgrind, which run their program
// without an exec. Their long options are read
// as getopt_long reads them, abbreviations included (timeout --sig KILL);
// an option that resolves to none or several is reported. find -exec (and
// -execdir, -ok, -okdir), tar --to-command and --checkpoint-action=exec,
// ssh -o ProxyCommand/LocalCommand/KnownHostsCommand and rsync -e are
// extracted the same way. Programs that run commands in a language of
// their own (sed's e, awk's system() and pipes, make --eval or a makefile
// on stdin, git -c and --exec-path, vim -c, gdb -ex, parallel, unshare,
// tmux, …) are reported could_match.
//
// Scripts inside scripts are parsed recursively, up to a nesting depth of 8:
// the -c string of bash, sh, zsh, dash, ksh, mksh, ash and busybox sh; a
// heredoc or here-string fed to such a shell (also as bash /dev/stdin or
// . /dev/stdin); the call's stdin when the caller gives it (ExtractStdin);
// the arguments of eval, the action of trap, the values given to alias, and
// the values of PS0-PS4, PROMPT_COMMAND, BASH_ENV and ENV, which bash
// expands as code, and of the variables whose value other programs run as
// a command (GIT_SSH_COMMAND, GIT_EDITOR, EDITOR, PAGER, LESSOPEN, SHELL,
// …), wherever the string sets them: X=v cmd, export and declare, env X=v
// and sudo X=v. A BASH_FUNC_* value given to env is parsed as the function
// bash imports; variables that carry git configuration, interpreter or make
// options or a preloaded library (GIT_CONFIG_*, NODE_OPTIONS, PERL5OPT,
// MAKEFLAGS, LD_PRELOAD, …) are could_match.
//
// Bash turning data into code is reported could_match: PS4 and friends,
// ${X@P}, arithmetic ($((x)), (( )), let, [[ -eq ]], subscripts, slices)
// that evaluates a variable the script does not only set to numbers (its
// value could hold a[$(cmd)]), subscripts evaluated by unset, printf -v,
// declare or mapfile, mapfile -C, a nameref (declare -n) to a subscript,
// an indirect expansion ${!v} of a variable not only set to names or
// numbers, a value computed at run time given to declare -a/-A, and what
// is assigned to an integer variable (declare -i) unless it is a plain
// number expression. A quoted '(...)' given to declare, local, typeset,
// readonly or export (declare -a x='($(cmd))') is parsed as the compound
// assignment bash makes of it. hash -p, enable -f, fc (but fc -l) and
// compgen -F are unresolved; compgen -C's command is parsed.
//
// A heredoc that bash would end earlier than the parser (a body line bash
// takes for the delimiter after joining backslash-newlines, or a delimiter
// followed by ) or ` inside a substitution) is refused: the policy does not
// guess which text bash runs.
//
// # Unresolved
//
// What cannot be known without running the script is returned as an
// [Unresolved] item with a reason and a kind:
//   - kind "" (unknown) makes the decision at least prompt: a command name
//     from a parameter expansion, a substitution, arithmetic or a glob; eval;
//     source or . of a computed path or a file descriptor; alias; a call to
//     a function defined in the script (its body is extracted as well); a
//     shell that reads its script from a pipe, inherited stdin, a process
//     substitution or a computed path; a -c string or heredoc with
//     expansions; a wrapper option that cannot be resolved;
//   - kind could_match makes it prompt when the policy has any prompt or
//     forbidden rule (or default): something known only at run time could
//     make a command match such a rule;
//   - kind refused makes it the strictest decision the policy can make
//     (never less than prompt): a script over [MaxScriptBytes] or nested
//     more than 10000 levels, one that does not parse (the shell runs what
//     precedes a syntax error), nested scripts past the depth limit, wrapper
//     chains past 16, more than 4096 commands, and heredocs bash ends
//     elsewhere. A limit never turns forbidden into prompt.
//
// Extraction never panics and its work is bounded. Deep nesting is measured
// before parsing by a conservative one-pass scan (brackets count even
// inside quotes and heredocs, and if/while/until/for/case/select open a
// level that only fi/done/esac close), because the parser recurses once
// per level and a stack overflow cannot be recovered. Long operator chains
// (a && b && ..., arithmetic, [[ ]]) are walked without recursion. The
// expansion text copied into arguments is capped: past 4 MiB per call an
// expansion is shown as "$…".
//
// # Limits
//
// The policy sees what a shell would run, not what programs do with their
// arguments: the code given to python -c, perl -e or node -e, the command
// ssh runs on a remote host, git aliases, make recipes and the contents of
// script files named on the command line are not examined. Those programs
// execute other programs to act, and the runtime guard (pkg/execguard)
// decides each of those execs; what a program does without executing
// another (a builtin, its own network calls or file writes) is the
// sandbox's job.
//
// # Rules
//
// [Load] and [LoadSource] read files of prefix_rule(...) calls, evaluated as
// Starlark with no load(), no printing and a step limit:
//
//	prefix_rule(
//	    pattern = ["git", ["push", "fetch"]],   # a token prefix; a list is alternatives
//	    decision = "prompt",                     # allow (default) | prompt | forbidden
//	    justification = "talks to a remote",
//	    match = [["git", "push", "origin"], "git fetch --all"],
//	    not_match = ["git status"],
//	)
//
// String examples are split with go-shellwords. Every example is checked
// against its own rule when the file loads; a failure, an unknown function or
// keyword, or a wrong type is a [result.CodePolicyInvalid] error naming the file, the line,
// the rule and the example.
//
// # Decisions
//
// [Policy.Check] and [Policy.CheckArgv] match every extracted command against
// every rule; [Policy.DecideExec] matches one argv exactly as a program
// received it (the runtime guard's question). A rule matches when its
// pattern is a prefix of the argv, token by token. When argv[0] is a path,
// its base name is tried too, so /bin/rm and ./rm match a rule for rm (a rule
// written with a full path still matches that path exactly). For git, the
// argv without git's global options (-C DIR, -c K=V, --git-dir=…, …) and a
// dashed command (git-push) are tried too; a prompt or forbidden rule's long
// option also matches its abbreviations (--har for --hard), as getopt_long
// and git accept them. Every form is decided and the strictest wins.
//
// The strictest matching rule decides a command (forbidden > prompt >
// allow; among equals, the first loaded); a command no rule matches gets
// [Policy.Default]. The overall decision is the strictest over all
// commands and unresolved items, as their kinds say (see Unresolved).
package policy
