package result

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestCodeTable checks the table itself: each code once, snake_case, with
// a one-line meaning and the programs that report it.
func TestCodeTable(t *testing.T) {
	seen := map[string]bool{}
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	for _, c := range Codes {
		if seen[c.Code] {
			t.Errorf("%s is in the table twice", c.Code)
		}
		seen[c.Code] = true
		if !snake.MatchString(c.Code) {
			t.Errorf("%q is not snake_case", c.Code)
		}
		if c.Meaning == "" || strings.Contains(c.Meaning, "\n") || strings.HasSuffix(c.Meaning, ".") {
			t.Errorf("%s: the meaning must be one line without a final period: %q", c.Code, c.Meaning)
		}
		if len(c.Programs) == 0 {
			t.Errorf("%s: no program reports it", c.Code)
		}
	}
	for _, c := range []string{CodeWaitTimeout, CodeJobFailed, CodeNotReady} {
		if !IsOutcome(c) {
			t.Errorf("%s is an outcome", c)
		}
	}
	if IsOutcome(CodeInternal) || IsOutcome("no_such_code") {
		t.Error("IsOutcome is true for a failure")
	}
}

// TestSourceCodesInTable parses every Go file of pkg/ and cmd/ and fails on
// a code the table does not name: a Code… constant declared with a string
// (outside this package it must not be declared at all), a literal passed
// to Errorf, put in an Error's Code or compared with a Code.
func TestSourceCodesInTable(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	n := 0
	for _, dir := range []string{"pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			n++
			here := filepath.ToSlash(filepath.Dir(path)) == filepath.ToSlash(filepath.Join(root, "pkg", "result"))
			check := func(e ast.Expr, what string) {
				lit, ok := e.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return
				}
				code, _ := strconv.Unquote(lit.Value)
				if code == "" {
					return
				}
				pos := fset.Position(lit.Pos())
				if _, ok := Lookup(code); !ok {
					t.Errorf("%s: code %q (%s) is not in result.Codes", pos, code, what)
				} else if !here {
					t.Errorf("%s: code %q (%s) is a literal; use the result.Code… constant", pos, code, what)
				}
			}
			ast.Inspect(f, func(node ast.Node) bool {
				switch x := node.(type) {
				case *ast.ValueSpec:
					for i, name := range x.Names {
						if !regexp.MustCompile(`^Code[A-Z]`).MatchString(name.Name) || i >= len(x.Values) {
							continue
						}
						if lit, ok := x.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if !here {
								t.Errorf("%s: %s declares an error code; declare it once in pkg/result", fset.Position(name.Pos()), name.Name)
							}
							check(lit, "constant "+name.Name)
						}
					}
				case *ast.CallExpr:
					if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Errorf" && isIdent(sel.X, "result") && len(x.Args) > 0 {
						check(x.Args[0], "result.Errorf")
					}
					if id, ok := x.Fun.(*ast.Ident); ok && here && id.Name == "Errorf" && len(x.Args) > 0 {
						check(x.Args[0], "Errorf")
					}
				case *ast.KeyValueExpr:
					if isIdent(x.Key, "Code") {
						check(x.Value, "Code field")
					}
				case *ast.BinaryExpr:
					if x.Op == token.EQL || x.Op == token.NEQ {
						if isCodeSel(x.X) {
							check(x.Y, "compared with a code")
						}
						if isCodeSel(x.Y) {
							check(x.X, "compared with a code")
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 50 {
		t.Fatalf("parsed only %d files: is the walk rooted at the repository?", n)
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func isCodeSel(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	return ok && (sel.Sel.Name == "Code" || sel.Sel.Name == "ErrorCode")
}

// notCodes are the snake_case words CONTRACT.md writes in backticks that
// are field names, values or settings, not error codes. A new snake_case
// word in CONTRACT.md must be either a code in the table or listed here.
var notCodes = map[string]string{
	"dropped_bytes":   "logs field",
	"elapsed_ms":      "result field",
	"exit_code":       "result field",
	"expected_count":  "edit key",
	"host_restarted":  "lost_reason / ended_reason value",
	"input_schema":    "MCP tool field",
	"lost_reason":     "status field",
	"new_file":        "agentfs field",
	"next_offset":     "logs field",
	"old_string":      "edit key",
	"original_file":   "agentfs field",
	"orphan_pid":      "status field",
	"sandbox_lock":    "config setting",
	"stderr_file":     "result field",
	"stdout_file":     "result field",
	"supervisor_died": "lost_reason value",
}

// TestContractCodesInTable parses CONTRACT.md: every snake_case word in
// backticks is either an error code in the table or a known non-code.
func TestContractCodesInTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "CONTRACT.md"))
	if err != nil {
		t.Skipf("CONTRACT.md is not beside the repository: %v", err)
	}
	words := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z]+(?:_[a-z]+)+)`").FindAllStringSubmatch(string(data), -1) {
		words[m[1]] = true
	}
	codes := 0
	for w := range words {
		_, isCode := Lookup(w)
		_, isNot := notCodes[w]
		switch {
		case isCode && isNot:
			t.Errorf("%s is both a code and listed in notCodes", w)
		case isCode:
			codes++
		case !isNot:
			t.Errorf("CONTRACT.md names %q, which is not in result.Codes (if it is not an error code, list it in notCodes)", w)
		}
	}
	for w := range notCodes {
		if !words[w] {
			t.Errorf("notCodes lists %q, which CONTRACT.md no longer names", w)
		}
	}
	if codes < 20 {
		t.Fatalf("found only %d codes in CONTRACT.md: is the parse right?", codes)
	}
}
