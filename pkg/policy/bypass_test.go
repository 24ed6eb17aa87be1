package policy

import (
	"strings"
	"testing"
)

// redTeamRules is the policy the bypass classes are attacked with.
const redTeamRules = `
prefix_rule(pattern=["git", "push"], decision="forbidden", justification="no pushing")
prefix_rule(pattern=["git", "reset", "--hard"], decision="forbidden")
prefix_rule(pattern=["rm", ["-rf", "-fr", "-r"]], decision="forbidden")
prefix_rule(pattern=["curl"], decision="prompt")
prefix_rule(pattern=["sudo"], decision="forbidden")
prefix_rule(pattern=["chmod", "777"], decision="forbidden")
`

// TestBypassClasses holds one case per class of the red team's bypasses
// (issue 17): each must be decided at least prompt, and those that name a
// forbidden command outright must stay forbidden. A case that turns
// "allow" means the class reopened.
func TestBypassClasses(t *testing.T) {
	p, err := LoadSource("red.star", []byte(redTeamRules))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		class, script, atLeast string
	}{
		// Claimed classes.
		{"NUL in $'…'", `$'git\0' push`, Forbidden},
		{"NUL in $'…' hex", `$'git\x00junk' push`, Forbidden},
		{"NUL in $'…' unicode", `git $'push\u0000x'`, Forbidden},
		{"env --split abbreviation", `env --split 'git push'`, Forbidden},
		{"env --spl=", `env --spl='git push'`, Forbidden},
		{"timeout --sig", `timeout --sig KILL 5 git push`, Forbidden},
		{"timeout --kill", `timeout --kill 1 5 git push`, Forbidden},
		{"nice --adj", `nice --adj 5 git push`, Forbidden},
		{"nice --adjustment=", `nice --adjustment=5 git push`, Forbidden},
		{"stdbuf --out", `stdbuf --out L git push`, Forbidden},
		{"unknown wrapper option", `timeout --frobnicate 5 git push`, Prompt},
		{"env -S ${X}", `env -S 'g${X}it push'`, Prompt},
		{"env -S \\_", `env -S 'git\_push'`, Forbidden},
		{"env -S quotes", `env -S "git 'push'"`, Forbidden},
		{"env -S \\c", `env -S 'git push\c ignored'`, Forbidden},
		{"bash /dev/stdin here-string", `bash /dev/stdin <<< 'git push'`, Forbidden},
		{"sh /dev/fd/0 heredoc", "sh /dev/fd/0 <<EOF\ngit push\nEOF\n", Forbidden},
		{"bash <(…)", `bash <(echo git push)`, Prompt},
		{"bash < <(…)", `bash < <(echo git push)`, Prompt},
		{". /dev/stdin", `. /dev/stdin <<< 'git push'`, Forbidden},
		{"source /dev/stdin from pipe", `echo 'git push' | source /dev/stdin`, Prompt},
		{"source <(…)", `source <(echo git push)`, Prompt},
		{"pipe to bash -s", `echo 'git push' | bash -s`, Prompt},
		{"heredoc ${ with early end", "cat <<EOF\n${x:-\nEOF\ngit push\n}\nEOF\n", Prompt},
		{"heredoc backslash-newline end", "cat <<EOF\nEOF\\\n\ngit push\nEOF\n", Prompt},

		// Arguments known only at run time.
		{"xargs appends", `echo push | xargs git`, Prompt},
		{"xargs -I", `echo push | xargs -I{} git {}`, Prompt},
		{"xargs -I sh -c", `echo 'git push' | xargs -I{} sh -c '{}'`, Prompt},
		{"find -exec {}", `find push -exec git {} \;`, Prompt},
		{"find -exec +", `find . -name push -exec git {} +`, Prompt},
		{"variable argument", `git $sub origin`, Prompt},
		{"quoted variable argument", `git "$sub"`, Prompt},
		{"variable could be an option", `rm "$opt" build`, Prompt},
		{"substitution argument", `git $(echo push)`, Prompt},
		{"brace argument", `git {push,origin}`, Forbidden},
		{"brace sequence", `rm -{r,f}f x`, Forbidden},
		{"glob argument", `git pu?h`, Prompt},
		{"glob bracket", `git pus[h]`, Prompt},

		// git's own grammar.
		{"git -C", `git -C . push`, Forbidden},
		{"git --git-dir", `git --git-dir=.git push`, Forbidden},
		{"git --no-pager", `git --no-pager -c x=y push`, Forbidden},
		{"git -c fsmonitor", `git -c core.fsmonitor='git push' status`, Prompt},
		{"git reset --har", `git reset --har`, Forbidden},
		{"git dashed", `/usr/lib/git-core/git-push origin`, Forbidden},

		// Programs that run commands.
		{"flock", `flock /tmp/l git push`, Forbidden},
		{"flock -c", `flock /tmp/l -c 'git push'`, Forbidden},
		{"script -c", `script -qc 'git push' /dev/null`, Prompt},
		{"script --command", `script --command 'git push' /dev/null`, Forbidden},
		{"taskset", `taskset 0x1 git push`, Forbidden},
		{"taskset -c", `taskset -c 0 git push`, Forbidden},
		{"chrt", `chrt 0 git push`, Forbidden},
		{"su -c", `su -c 'git push' root`, Forbidden},
		{"runuser", `runuser -u me -- git push`, Prompt},
		{"sg", `sg users 'git push'`, Forbidden},
		{"watch", `watch -n 1 git push`, Forbidden},
		{"sed e", `echo x | sed 's/x/git push/e'`, Prompt},
		{"sed e command", `sed '1e git push' f`, Prompt},
		{"awk system", `awk 'BEGIN{system("git push")}'`, Prompt},
		{"awk pipe", `awk 'BEGIN{print "git push" | "sh"}'`, Prompt},
		{"tar --to-command", `tar xf a.tar --to-command='git push'`, Forbidden},
		{"tar checkpoint", `tar cf a.tar . --checkpoint-action=exec='git push'`, Forbidden},
		{"ssh ProxyCommand", `ssh -o ProxyCommand='git push' host`, Forbidden},
		{"ssh -oProxyCommand", `ssh '-oProxyCommand=git push' host`, Forbidden},
		{"rsync -e", `rsync -e 'sh -c "git push"' a b:`, Forbidden},
		{"make --eval", `make --eval 'x: ; git push' x`, Prompt},
		{"make -f -", `echo 'x: ; git push' | make -f - x`, Prompt},
		{"strace", `strace -f -o /dev/null git push`, Forbidden},
		{"ld.so", `/lib64/ld-linux-x86-64.so.2 /usr/bin/git push`, Forbidden},
		{"ld.so options", `/lib/ld-linux-aarch64.so.1 --argv0 ls --library-path /lib git push`, Forbidden},
		{"valgrind", `valgrind -q --tool=none git push`, Forbidden},
		{"parallel", `parallel ::: 'git push'`, Prompt},
		{"vim -c", `vim -c '!git push' -c q`, Prompt},
		{"start-stop-daemon", `start-stop-daemon --start --exec /usr/bin/git -- push`, Prompt},
		{"pkexec", `pkexec git push`, Prompt},
		{"unbuffer", `unbuffer git push`, Prompt},
		{"socat EXEC", `socat - EXEC:'git push'`, Prompt},
		{"nc -e", `nc -l -p 1234 -e /usr/bin/git`, Prompt},
		{"toybox", `toybox git push`, Forbidden},
		{"chronic", `chronic git push`, Prompt},

		// bash turning data into code.
		{"PS4 with set -x", `PS4='$(git push)'; set -x; true`, Forbidden},
		{"PS4 from a variable", `PS4=$X; set -x; true`, Prompt},
		{"${X@P}", `X='$(echo hi)'; echo "${X@P}"`, Prompt},
		{"arithmetic subscript", `x='a[$(git push)]'; echo $((x))`, Prompt},
		{"arithmetic in [[", `[[ $x -eq 1 ]]`, Prompt},
		{"hash -p", `hash -p /usr/bin/git ls; ls push`, Prompt},
		{"BASH_ENV assignment", `BASH_ENV='$(git push)' bash -c true`, Forbidden},
		{"export BASH_ENV", `export BASH_ENV=/tmp/x; bash -c true`, Prompt},
		{"unset subscript", `unset 'a[$(git push)]'`, Prompt},
		{"printf -v subscript", `printf -v 'a[$(git push)]' x`, Prompt},
		{"mapfile -C", `mapfile -C 'git push' -c 1 < f`, Prompt},
		{"declare -a from a string", `declare -a x='($(git push))'`, Forbidden},
		{"declare -a quoted whole", `declare -a 'x=($(git push))'`, Forbidden},
		{"declare -A from a string", `declare -A x='([k]=$(git push))'`, Forbidden},
		{"declare -a subscript from a string", `declare -a x='([$(git push)]=1)'`, Forbidden},
		{"declare of an array from a string", `x=(); declare x='($(git push))'`, Forbidden},
		{"local -a from a string", `f() { local -a x='(` + "`git push`" + `)'; }; f`, Forbidden},
		{"declare -a with an expansion", `declare -a x="(\$(git push) $y)"`, Forbidden},
		{"declare -a from a variable", `v='($(git push))'; declare -a x=$v`, Prompt},
		{"nameref subscript", `declare -n r='a[$(git push)]'; r=1`, Prompt},
		{"indirect expansion", `r='a[$(git push)]'; echo ${!r}`, Prompt},
		{"integer attribute", `declare -i x; x='a[$(git push)]'`, Prompt},
		{"integer attribute value", `x='a[$(git push)]'; declare -i y=x`, Prompt},
		{"fc -s", `history -s 'git push'; fc -s`, Prompt},
		{"fc -e", `history -s x; fc -e 'git push;' -1`, Forbidden},
		{"compgen -C", `compgen -C 'git push' x`, Forbidden},
		{"compgen -F", `f() { :; }; compgen -F f x`, Prompt},

		// The environment the string sets, which a program runs as code.
		{"env BASH_FUNC_", `env 'BASH_FUNC_ls%%=() { git push; }' bash -c ls`, Forbidden},
		{"env BASH_ENV", `env BASH_ENV=/dev/stdin bash -c true <<< 'git push'`, Prompt},
		{"env -S BASH_ENV", `env -S 'BASH_ENV=/dev/stdin bash -c true' <<< 'git push'`, Prompt},
		{"env PROMPT_COMMAND", `env PROMPT_COMMAND='git push' bash -i`, Forbidden},
		{"sudo BASH_ENV", `sudo BASH_ENV=/dev/stdin bash -c true <<< 'git push'`, Prompt},
		{"GIT_SSH_COMMAND", `GIT_SSH_COMMAND='git push' git fetch`, Forbidden},
		{"export GIT_SSH_COMMAND", `export GIT_SSH_COMMAND='git push'; git fetch`, Forbidden},
		{"export quoted assignment", `export 'GIT_SSH_COMMAND=git push'; git fetch`, Forbidden},
		{"env GIT_SSH_COMMAND", `env GIT_SSH_COMMAND='git push' git fetch`, Forbidden},
		{"GIT_EDITOR", `GIT_EDITOR='git push;' git commit`, Forbidden},
		{"EDITOR", `EDITOR='git push;' git commit`, Forbidden},
		{"PAGER", `PAGER='git push;' man ls`, Forbidden},
		{"LESSOPEN", `LESSOPEN='|git push %s' less f`, Forbidden},
		{"SHELL", `SHELL=/usr/bin/curl script -qc x /dev/null`, Prompt},
		{"GIT_CONFIG_COUNT", `GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.sshCommand GIT_CONFIG_VALUE_0='git push' git fetch`, Prompt},
		{"GIT_CONFIG_PARAMETERS", `GIT_CONFIG_PARAMETERS="'core.sshcommand'='git push'" git fetch`, Prompt},
		{"NODE_OPTIONS", `NODE_OPTIONS='--require ./x.js' node -e 1`, Prompt},
		{"LD_PRELOAD", `LD_PRELOAD=./x.so true`, Prompt},
		{"command variable from a substitution", `GIT_SSH_COMMAND=$(cat f) git fetch`, Prompt},

		// Limits: refused, never demoted to prompt.
		{"too many commands", strings.Repeat("true;", 5000) + "git push", Forbidden},
		{"too deep -c", deepC("git push", maxDepth+2), Forbidden},
		{"too long", strings.Repeat("#", MaxScriptBytes+1) + "\ngit push", Forbidden},
		{"too deep nesting", strings.Repeat("(", maxNesting+1) + "git push" + strings.Repeat(")", maxNesting+1), Forbidden},
		{"syntax error after the command", "git push\n(", Forbidden},
		{"wrapper chain", strings.Repeat("nice ", maxWrappers+5) + "git push", Forbidden},
	}
	for _, tc := range cases {
		d := p.Check(tc.script)
		if rank(d.Decision) < rank(tc.atLeast) {
			short := tc.script
			if len(short) > 80 {
				short = short[:80] + "…"
			}
			t.Errorf("%s: %q decided %s, want at least %s (%+v)", tc.class, short, d.Decision, tc.atLeast, d.Unresolved)
		}
	}
}

// TestBypassClassesArgv: an argv run without a shell is looked into as a
// string is, the environment its wrappers set included.
func TestBypassClassesArgv(t *testing.T) {
	p, err := LoadSource("red.star", []byte(redTeamRules))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv    []string
		atLeast string
	}{
		{[]string{"env", "BASH_FUNC_ls%%=() { git push; }", "bash", "-c", "ls"}, Forbidden},
		{[]string{"env", "GIT_CONFIG_COUNT=1", "git", "fetch"}, Prompt},
		{[]string{"/lib64/ld-linux-x86-64.so.2", "/usr/bin/git", "push"}, Forbidden},
		{[]string{"printf", "-v", "a[$(git push)]", "x"}, Prompt},
	} {
		if d := p.CheckArgv(tc.argv); rank(d.Decision) < rank(tc.atLeast) {
			t.Errorf("%q decided %s, want at least %s", tc.argv, d.Decision, tc.atLeast)
		}
	}
}

func deepC(s string, n int) string {
	for range n {
		s = "sh -c " + shellQuote(s)
	}
	return s
}

// TestOrdinaryCommandsAllowed: what agents type every day stays allowed
// under a policy with prompt and forbidden rules, so that the checks above
// do not teach people to click through prompts.
func TestOrdinaryCommandsAllowed(t *testing.T) {
	p, err := LoadSource("red.star", []byte(redTeamRules))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`if [ -f go.mod ]; then go build ./...; fi`,
		`[ -d build ] || mkdir -p build`,
		`test -n "$CI" && echo ci`,
		`go test ./... 2>&1 | tail -20`,
		`make -j2 && ./bin/app --version`,
		`npm ci && npm test`,
		`git status && git diff --stat`,
		`git log --oneline -n 5`,
		`git commit -am "fix: $msg"`,
		`git add -A && git commit -m wip`,
		`git checkout -b feature/x`,
		`rm -f build/*.o`,
		`find . -name '*.go' -exec gofmt -l {} +`,
		`find . -type f -name '*.pyc' -delete`,
		`ls | xargs -n1 echo`,
		`grep -rn TODO src | head`,
		`sed -i 's/foo/bar/g' main.go`,
		`sed -n '1,20p' file.txt`,
		`awk '{print $1}' access.log | sort | uniq -c`,
		`awk -F: '$3 >= 1000 || $1 == "root" {print $1}' /etc/passwd`,
		`tar czf out.tgz dir`,
		`for f in *.txt; do wc -l "$f"; done`,
		`for i in 1 2 3; do echo $((i * 2)); done`,
		`n=0; while [ $n -lt 3 ]; do n=$((n+1)); done`,
		`cd src && python3 -m pytest -q`,
		`cat <<EOF > notes.md` + "\n# notes\nEOF\n",
		`docker ps 2>/dev/null || echo none`,
		`export PATH="$HOME/go/bin:$PATH"; go version`,
		`echo "${HOME}/x" {a,b}`,
		`timeout 60 go test -run TestX ./pkg/...`,
		`env GOFLAGS=-mod=mod go build`,
		`ssh-keygen -lf ~/.ssh/id_ed25519.pub`,
		`curl_config=1 true`,
		`EDITOR=vim git commit`,
		`GIT_SSH_COMMAND='ssh -i ~/.ssh/deploy -o IdentitiesOnly=yes' git fetch`,
		`PAGER=cat git log -n 3`,
		`export EDITOR=nano VISUAL=nano`,
		`declare -a files=(a b c); echo "${files[@]}"`,
		`declare -i n=0; n=n+1; echo $n`,
		`local_var=1; declare -r RO=2`,
		`for v in HOME PATH; do echo "${!v}"; done`,
		`echo "${!prefix@}" "${!arr[@]}"`,
		`fc -l`,
		`nc -z localhost 8080`,
	} {
		if d := p.Check(s); d.Decision != Allow {
			t.Errorf("%q decided %s: %+v %+v", s, d.Decision, d.Commands, d.Unresolved)
		}
	}
}
