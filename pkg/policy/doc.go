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
// Words are resolved statically: quotes are removed, backslash escapes and
// $'...' escapes are decoded and literal pieces are joined, so `"r"m`,
// `r""m`, r followed by empty single quotes and m, `\rm` and `$'\x72m'` all
// give rm. A part that is only known at run time
// (a parameter expansion, a command or process substitution, arithmetic) is
// kept in the argument as its source text without quotes: `rm "$f"` gives
// [rm $f] and `echo $(date)` gives [echo $(date)]. Such an argument never makes
// a command unresolved; it simply will not equal a literal rule token. Globs and
// braces in arguments are kept as written (`rm *.o` gives [rm *.o]).
//
// A wrapper yields itself and the command it runs, recursively: xargs, env
// (including env -S), sudo, doas, nice, ionice, timeout, nohup, stdbuf, time
// (keyword and program), command (not with -v/-V, which only describe), exec,
// builtin, setsid, chroot DIR CMD and busybox CMD. `find ... -exec CMD ... ;`
// (and -execdir, -ok, -okdir) is treated the same way: find is reported and
// CMD is extracted with its {} kept literally, because the command is right
// there in the argv and a prompt for every find -exec would teach people to
// click through prompts.
//
// Scripts inside scripts are parsed recursively, up to a nesting depth of 8:
// the -c string of bash, sh, zsh, dash, ksh, mksh, ash and busybox sh; a
// heredoc or here-string fed to such a shell; the arguments of eval, the
// action of trap and the values given to alias.
//
// # Unresolved
//
// What cannot be known without running the script is returned as an
// [Unresolved] item with a reason, and makes a decision at least "prompt":
//   - a command name that comes from a parameter expansion, a command
//     substitution (whose inner commands are still extracted), arithmetic,
//     a process substitution, a glob or a brace expansion;
//   - eval (its literal text is also parsed and its commands extracted);
//   - source or . of a path that is not literal;
//   - alias (its literal values are also parsed);
//   - a call to a function defined in the same script: the call is reported
//     as unresolved with reason "function defined in the script", because the
//     function's arguments flow into its body, and the body is extracted as
//     ordinary commands anyway;
//   - a shell that reads its script from a pipe or inherited standard input
//     (`curl ... | sh`), or a -c string or heredoc that contains expansions
//     (the literal approximation is still parsed);
//   - a nested script that does not parse, nesting deeper than the limit, and
//     more than 4096 commands in one string.
//
// Extraction never panics and its work is bounded. Scripts over
// [MaxScriptBytes] are refused. So are scripts that nest more than 10000
// levels deep, measured before parsing by a conservative one-pass scan
// (brackets count even inside quotes and heredocs, and if/while/until/for/
// case/select open a level that only fi/done/esac close), because the parser
// recurses once per level and a stack overflow cannot be recovered. Long
// operator chains (a && b && ..., arithmetic, [[ ]]) are walked without
// recursion. Wrapper chains, nested scripts and the number of items are
// capped, and so is the expansion text copied into arguments: past 4 MiB
// per call an expansion is shown as "$…".
//
// # Limits
//
// The policy sees what a shell would run, not what programs do with their
// arguments: the code given to python -c, perl -e or node -e, the command
// ssh runs on a remote host, git aliases, make recipes and the contents of
// script files named on the command line are not examined. Write rules for
// those programs themselves (prefix_rule(pattern=["python3", "-c"], ...)).
// Arguments built from expansions are matched as their source text, so a
// rule ["rm", "-rf"] does not see `rm $FLAGS /`; a rule on the command name
// (["rm"]) does.
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
// every rule. A rule matches when its pattern is a prefix of the argv, token
// by token. When argv[0] is a path, its base name is tried too, so /bin/rm
// and ./rm match a rule for rm (a rule written with a full path still matches
// that path exactly). The strictest matching rule decides a command
// (forbidden > prompt > allow; among equals, the first loaded); a command no
// rule matches gets [Policy.Default]. The overall decision is the strictest
// over all commands, and at least prompt when anything is unresolved. A
// string that does not parse is decided prompt with the parse error as the
// unresolved reason: whatever runs is unknown.
package policy
