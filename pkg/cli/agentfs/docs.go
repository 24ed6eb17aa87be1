package agentfs

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

// changeResult lists the fields of a single-file change (write, edit,
// insert, undo).
const changeResult = `success: true
path: the file, as given
created: whether the file did not exist before
changed: whether its content changed
original_file, new_file: the whole text before and after (left out with --output diff or none, or past --max-content)
sha256_before, sha256_after: the file's sha256 before and after ("" where there was no file)
diff: a unified diff (left out with --output none)
diff_stats: {added, removed}, the lines added and removed
content_omitted: true when the texts were left out for --max-content (the diff stays)
dry_run: true with --dry-run: the same report, and the file, its mtime and its undo history untouched
description: the --description given, if any`

// commandDocs are the man-page sections of the program and its
// operations: examples and the result's fields, keyed by the command path
// below the root ("" is the root).
var commandDocs = map[string]clikit.Doc{
	"": {
		Example: `  sum=$(agentfs read -q sha256 src/main.go)
  agentfs edit src/main.go --old 'v1' --new 'v2' --expect-sha256 "$sum" --output diff
  git diff | agentfs patch --dry-run -q 'files.#.path'`,
		Result: `success: whether the operation succeeded; the fields of each operation are in its own page
error: on failure, {code, message} and what helps to recover (a hint, a path, the lines of matches); a bare agentfs is a usage_error listing the commands`,
	},
	"read": {
		Example: `  agentfs read src/main.go --offset 40 --limit 20 --numbered
  sum=$(agentfs read -q sha256 go.mod)
  echo '{"path": "README.md", "limit": 50}' | agentfs read --request - -q content`,
		Result: `success: true
path: the file, as given
content: the text of the lines read ("" for a binary file)
sha256: of the whole file, to pass back as --expect-sha256
size: the file's size in bytes
total_lines: the file's number of lines
line_start, line_end: the first and last line returned, 1-based (0 when none)
truncated: whether the content was cut at --max-bytes (without it, at 16 MiB: a larger file is read in one streaming pass, for its sha256 and total_lines, and never held whole)
binary: whether the file is binary (then only its facts are reported)
bom: whether the file starts with a UTF-8 byte-order mark (content is given without it)
description: the --description given, if any`,
	},
	"write": {
		Example: `  agentfs write notes/todo.md --content $'- ship it\n' --expect-absent
  go run ./gen | agentfs write internal/gen.go --output diff -q diff_stats
  agentfs write --request call.json   # {"path": "a.txt", "content": "…", "expect_sha256": "…"}`,
		Result: changeResult,
	},
	"edit": {
		Example: `  agentfs edit main.go --old 'println("hi")' --new 'println("hello")' --output diff
  agentfs edit config.yaml --edits @edits.json -q 'edits.#.start_line'   # [{"old_string": "…", "new_string": "…"}, …]
  agentfs edit --request call.json   # {"path": "main.go", "old": "…", "new": "…", "replace_all": true}`,
		Result: changeResult + `
edits: one object per edit: index, replacements, start_line, end_line, match (exact, line_endings or whitespace)
error: indentation_conflict when a --fuzzy match cannot be re-indented in the file's own style (tabs, or N spaces per level) without mixing tabs and spaces`,
	},
	"insert": {
		Example: `  agentfs insert main.go --line 2 --text 'import "fmt"'
  printf '## Changelog\n' | agentfs insert README.md --line 0 -q sha256_after
  agentfs insert --request call.json   # {"path": "a.txt", "line": 10, "text": "…"}`,
		Result: changeResult,
	},
	"patch": {
		Example: `  git diff | agentfs patch --dry-run -q 'files.#.action'
  agentfs patch --patch-file fix.diff --strip 1 --output diff
  agentfs patch --request call.json   # {"patch": "*** Begin Patch\n…\n*** End Patch\n"}`,
		Result: `success: true
format: unified or agent (the *** Begin Patch format)
dry_run: whether nothing was written
files: one object per file: path, action (add, update, delete or move), move_to for a move, overwrote when a move replaced a file, match when a hunk matched other than exactly, then the fields of a write (created, changed, deleted, original_file, new_file, sha256_before, sha256_after, diff, diff_stats, content_omitted)
description: the --description given, if any`,
	},
	"undo": {
		Example: `  agentfs undo src/main.go --output diff
  agentfs undo new.txt -q deleted
  echo '{"path": "src/main.go"}' | agentfs undo --request -`,
		Result: changeResult + `
deleted: true when undoing the file's creation deleted it`,
	},
	"stat": {
		Example: `  agentfs stat go.mod
  agentfs stat src -q kind
  echo '{"path": "bin/tool"}' | agentfs stat --request - -q mode`,
		Result: `success: true
path: the path, as given
kind: file, directory, symlink, fifo, socket, device or other (a final symlink is not followed)
size: in bytes
mode: the permission bits in octal, like 0644
mod_time: the modification time
sha256, total_lines: of a file
link_target: of a symlink
description: the --description given, if any`,
	},
	"list": {
		Example: `  agentfs list . --depth 2
  agentfs list src --depth 5 --glob '**/*.go' -q 'entries.#.path'
  echo '{"dir": "docs", "glob": "*.md"}' | agentfs list --request -`,
		Result: `success: true
path: the directory, as given
entries: one object per entry, depth first in lexical order: path (relative to the directory), kind, size, mode, mod_time, and link_target for a symlink
truncated: whether the listing stopped at 10000 entries
description: the --description given, if any`,
	},
}

// annotateDocs attaches the man-page sections to the commands.
func annotateDocs(root *cobra.Command) { clikit.AnnotateDocs(root, commandDocs) }
