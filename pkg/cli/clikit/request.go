package clikit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/agentplane/agentplane/internal/account"
	"github.com/agentplane/agentplane/internal/ctlfile"
	"github.com/agentplane/agentplane/pkg/result"
)

// AnnotJSON marks a string flag whose value is JSON text, so a request may
// give it as a JSON array or object.
const AnnotJSON = "agentplane/json"

// maxRequestSize bounds a request document; a model's tool call is small.
const maxRequestSize = 64 << 20

func invalidRequest(format string, args ...any) *result.Error {
	return result.Errorf(result.CodeInvalidRequest, format, args...)
}

// readRequest reads and decodes the --request document.
func (e *Env) readRequest() (map[string]any, error) {
	var r io.Reader
	if e.RequestFile == "-" {
		r = e.In
	} else {
		f, err := os.Open(e.RequestFile)
		if err != nil {
			return nil, invalidRequest("cannot open request file %s: %v", e.RequestFile, unwrapPath(err))
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxRequestSize+1))
	if err != nil {
		return nil, invalidRequest("cannot read the request: %v", err)
	}
	if len(data) > maxRequestSize {
		return nil, invalidRequest("the request is larger than %d bytes", maxRequestSize)
	}
	return DecodeRequest(data)
}

// DecodeRequest parses a request document: exactly one JSON object.
func DecodeRequest(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, invalidRequest("the request is empty; expected a JSON object")
		}
		return nil, invalidRequest("the request is not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, invalidRequest("the request has data after its JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalidRequest("the request has data after its JSON object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, invalidRequest("the request must be a JSON object, not %s", jsonKind(v))
	}
	if key, dup := duplicateKey(data); dup {
		return nil, invalidRequest("key %q is given twice; a request names each key once", key).With("key", key)
	}
	return m, nil
}

// duplicateKey finds a key given twice in one object of the (valid) JSON
// document data. Decoding keeps the last of them, while a host that shows
// the request for approval may show the first: the two must never differ.
func duplicateKey(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	// One entry per open container: the keys seen, nil for an array.
	var stack []map[string]bool
	expectKey := func() bool { return len(stack) > 0 && stack[len(stack)-1] != nil }
	wantKey := true // in an object, the next string token is a key
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, map[string]bool{})
				wantKey = true
				continue
			case '[':
				stack = append(stack, nil)
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if expectKey() && wantKey {
				keys := stack[len(stack)-1]
				if keys[t] {
					return t, true
				}
				keys[t] = true
				wantKey = false
				continue
			}
		}
		// A value ended (or a container closed): in an object a key comes next.
		wantKey = expectKey()
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// ArgNames returns the request keys of a command's positional arguments and
// whether the last one is variadic.
func ArgNames(cmd *cobra.Command) (names []string, variadic bool) {
	spec := cmd.Annotations[AnnotArgs]
	if spec == "" {
		return nil, false
	}
	names = strings.Split(spec, ",")
	last := names[len(names)-1]
	if strings.HasSuffix(last, "...") {
		names[len(names)-1] = strings.TrimSuffix(last, "...")
		variadic = true
	}
	return names, variadic
}

// applyRequest sets the flags named by the request's keys, except those
// given on the command line, and keeps positional keys for Positional.
func (e *Env) applyRequest(cmd *cobra.Command, set map[string]bool) error {
	req, err := e.readRequest()
	if err != nil {
		return err
	}
	e.Request = map[string]any{}
	argNames, variadic := ArgNames(cmd)
	isArg := map[string]bool{}
	for _, n := range argNames {
		isArg[n] = true
	}
	keys := make([]string, 0, len(req))
	for k := range req {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		val := req[key]
		// null is "not given": OpenAI's strict mode makes every key
		// required and sends null for the ones the model leaves out.
		if val == nil {
			if _, known := req[key]; known && (key == "description" || isArg[key] || knownKey(cmd, key)) {
				continue
			}
		}
		if key == "description" {
			s, ok := val.(string)
			if !ok {
				return invalidRequest("key %q: expected a string, got %s", key, jsonKind(val)).With("key", key)
			}
			if !set["description"] {
				e.Description = s
			}
			continue
		}
		if isArg[key] {
			e.Request[key] = val
			continue
		}
		name := strings.ReplaceAll(key, "_", "-")
		f := cmd.Flags().Lookup(name)
		if f == nil || f.Hidden || hasAnnot(f, AnnotNoRequest) || strings.Contains(key, "-") {
			return invalidRequest("unknown key %q", key).With("key", key).With("hint", "run '"+cmd.CommandPath()+" --help' or 'schema' for the accepted keys")
		}
		if set[name] {
			continue // the command line overrides the request
		}
		// A command string key may carry an argv array instead, when the
		// command takes a variadic positional (agentsh's command).
		if arr, ok := val.([]any); ok && variadic && f.Value.Type() == "string" && !hasAnnot(f, AnnotJSON) {
			last := argNames[len(argNames)-1]
			if other, given := req[last]; given && other != nil {
				return invalidRequest("give %q or %q, not both", key, last).With("key", last)
			}
			e.Request[last] = arr
			continue
		}
		if err := setFromJSON(f, key, val); err != nil {
			return err
		}
		if e.fromRequest == nil {
			e.fromRequest = map[string]bool{}
		}
		e.fromRequest[name] = true
	}
	return nil
}

// knownKey reports whether key names a request key of cmd's flags.
func knownKey(cmd *cobra.Command, key string) bool {
	if strings.Contains(key, "-") {
		return false
	}
	f := cmd.Flags().Lookup(strings.ReplaceAll(key, "_", "-"))
	return f != nil && !f.Hidden && !hasAnnot(f, AnnotNoRequest)
}

func hasAnnot(f *pflag.Flag, a string) bool {
	_, ok := f.Annotations[a]
	return ok
}

// setFromJSON converts a JSON value to the flag's string syntax, checking
// its type against the flag's.
func setFromJSON(f *pflag.Flag, key string, val any) error {
	typ := f.Value.Type()
	bad := func(want string) error {
		return invalidRequest("key %q: expected %s, got %s", key, want, jsonKind(val)).With("key", key)
	}
	setOne := func(s string) error {
		if err := f.Value.Set(s); err != nil {
			return invalidRequest("key %q: %v", key, err).With("key", key)
		}
		f.Changed = true
		return nil
	}
	if val == nil {
		return bad("a value")
	}
	switch typ {
	case "bool":
		b, ok := val.(bool)
		if !ok {
			return bad("a boolean")
		}
		if b {
			return setOne("true")
		}
		return setOne("false")
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		n, ok := val.(json.Number)
		if !ok {
			return bad("an integer")
		}
		if _, err := n.Int64(); err != nil {
			return bad("an integer")
		}
		return setOne(n.String())
	case "float32", "float64":
		n, ok := val.(json.Number)
		if !ok {
			return bad("a number")
		}
		return setOne(n.String())
	case "duration", "size":
		switch v := val.(type) {
		case json.Number:
			return setOne(v.String())
		case string:
			return setOne(v)
		}
		if typ == "duration" {
			return bad("a duration (a number of seconds or a string like \"90s\")")
		}
		return bad("a size (a number of bytes or a string like \"64M\")")
	case "stringArray", "stringSlice":
		var items []string
		switch v := val.(type) {
		case string:
			items = []string{v}
		case []any:
			for _, it := range v {
				s, ok := it.(string)
				if !ok {
					return bad("an array of strings")
				}
				items = append(items, s)
			}
		case map[string]any:
			if !hasAnnot(f, AnnotObject) {
				return bad("an array of strings")
			}
			ks := make([]string, 0, len(v))
			for k := range v {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				if k == "" || strings.ContainsAny(k, "=\x00") {
					return invalidRequest("key %q: %q is not a valid name (empty, or holds '=' or a NUL byte)", key, k).With("key", key)
				}
				s, ok := v[k].(string)
				if !ok {
					if n, isNum := v[k].(json.Number); isNum {
						s = n.String()
					} else if b, isBool := v[k].(bool); isBool {
						s = fmt.Sprint(b)
					} else {
						return invalidRequest("key %q: value of %q must be a string", key, k).With("key", key)
					}
				}
				items = append(items, k+"="+s)
			}
		default:
			if hasAnnot(f, AnnotObject) {
				return bad("an object of strings")
			}
			return bad("an array of strings")
		}
		for _, it := range items {
			if err := setOne(it); err != nil {
				return err
			}
		}
		return nil
	default: // string, enum and custom string-like values
		switch v := val.(type) {
		case string:
			return setOne(v)
		case []any, map[string]any:
			if hasAnnot(f, AnnotJSON) {
				b, _ := json.Marshal(v)
				return setOne(string(b))
			}
		case json.Number:
			// A number is a string flag's value only where the flag
			// declares a numeric syntax of its own (--mode 644); a
			// command, a path or stdin given as a number is a wrong
			// type, not text to run.
			if typ != "string" || hasAnnot(f, string(Numeric)) {
				return setOne(v.String())
			}
		}
		return bad("a string")
	}
}

// Positional returns the command's positional arguments: those on the
// command line, or else the request's keys named by the command's args
// annotation. It checks their count.
func (e *Env) Positional(cmd *cobra.Command, args []string, min int) ([]string, error) {
	names, variadic := ArgNames(cmd)
	if len(args) == 0 && e.Request != nil {
		for i, n := range names {
			v, ok := e.Request[n]
			if !ok || v == nil {
				continue
			}
			switch t := v.(type) {
			case string:
				if variadic && i == len(names)-1 {
					return nil, invalidRequest("key %q: expected an array of strings", n).With("key", n)
				}
				args = append(args, t)
			case []any:
				if !(variadic && i == len(names)-1) {
					return nil, invalidRequest("key %q: expected a string", n).With("key", n)
				}
				for _, it := range t {
					s, ok := it.(string)
					if !ok {
						return nil, invalidRequest("key %q: expected an array of strings", n).With("key", n)
					}
					args = append(args, s)
				}
			default:
				return nil, invalidRequest("key %q: expected a string, got %s", n, jsonKind(v)).With("key", n)
			}
		}
	}
	if len(args) < min {
		missing := "an argument"
		if len(names) > len(args) {
			missing = names[len(args)]
		}
		return nil, result.Errorf(result.CodeUsage, "%s: missing %s", cmd.CommandPath(), missing)
	}
	if !variadic && len(args) > len(names) {
		return nil, result.Errorf(result.CodeUsage, "%s: unexpected argument %q", cmd.CommandPath(), args[len(names)])
	}
	return args, nil
}

// configPath returns the config file to read, or "" for none. A config
// file is never taken from the working directory: a repository must not be
// able to loosen its own sandbox.
func (e *Env) configPath() (string, bool) {
	files := e.ConfigFiles()
	if len(files) == 0 {
		return "", false
	}
	return files[0].Path, files[0].Explicit
}

// A ConfigFile is a config file an invocation could read.
type ConfigFile struct {
	Path string
	// Explicit: named by --config or AGENTPLANE_CONFIG (it must exist),
	// rather than the default location (it may not exist yet).
	Explicit bool
	// System: the system-wide file (DefaultSystemConfig), the base layer
	// under every other.
	System bool
}

// DefaultSystemConfig is the system-wide config file. Its place is fixed:
// HOME, XDG_CONFIG_HOME, AGENTPLANE_CONFIG and --config move the user's
// file, never this one, so that an operator's sandbox_lock here holds
// whatever environment a call (or a command's own agentsh, or a host a
// model configured) runs with.
const DefaultSystemConfig = "/etc/agentplane/config.toml"

// systemConfig is the system-wide file of this invocation.
func (e *Env) systemConfig() string {
	if e.SystemConfig != "" {
		return e.SystemConfig
	}
	return DefaultSystemConfig
}

// ConfigFiles returns every config file this invocation could read, each
// once: the one it reads its settings from first (--config's, else
// AGENTPLANE_CONFIG's, else the default one), then those the first
// shadows, and last the system-wide one, the base layer under the first.
// The sandbox keeps them all read-only to commands, and the sandbox lock
// holds in each (Sources), so that naming another file does not escape
// the one the operator locked.
func (e *Env) ConfigFiles() []ConfigFile {
	var out []ConfigFile
	add := func(p string, explicit bool) {
		for _, f := range out {
			if f.Path == p {
				return
			}
		}
		out = append(out, ConfigFile{Path: p, Explicit: explicit})
	}
	if e.ConfigFile != "" {
		add(e.ConfigFile, true)
	}
	if p, ok := e.LookupEnv("AGENTPLANE_CONFIG"); ok && p != "" {
		add(p, true)
	}
	if p := userConfig(e.Getenv("XDG_CONFIG_HOME"), e.Getenv("HOME")); p != "" {
		add(p, false)
	}
	if sys := e.systemConfig(); !slices.ContainsFunc(out, func(f ConfigFile) bool { return f.Path == sys }) {
		out = append(out, ConfigFile{Path: sys, System: true})
	}
	return out
}

// userConfig is the user's default config file for these variables, or
// "" for none.
func userConfig(xdgConfigHome, home string) string {
	dir := xdgConfigHome
	if dir == "" || !filepath.IsAbs(dir) {
		dir = ""
		// A relative HOME would read a config file below the working
		// directory (a repository's, /tmp's): none, as without HOME.
		if filepath.IsAbs(home) {
			dir = filepath.Join(home, ".config")
		}
	}
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "agentplane", "config.toml")
}

// ProtectedConfigs are ConfigFiles and the user's default config files
// that XDG_CONFIG_HOME or HOME moved the invocation away from (the one
// of HOME, and the one of the home in the user database): a sandbox
// keeps them all read-only to commands, as the user's next call, with
// the variables as they were, reads them. Their locks hold only in
// ConfigFiles: the system-wide file is the floor no variable moves.
func (e *Env) ProtectedConfigs() []ConfigFile {
	out := e.ConfigFiles()
	homes := []string{e.Getenv("HOME")}
	if u, err := account.Describe(os.Geteuid()); err == nil {
		homes = append(homes, u.Home)
	}
	for _, home := range homes {
		if p := userConfig("", home); p != "" && !slices.ContainsFunc(out, func(f ConfigFile) bool { return f.Path == p }) {
			out = append(out, ConfigFile{Path: p})
		}
	}
	return out
}

// FromRequest reports whether the flag's value came from the JSON request
// (not the command line, the environment or the config file).
func (e *Env) FromRequest(flag string) bool { return e.fromRequest[flag] }

// ConfigKey is the name of a flag in the environment and config file.
func ConfigKey(flag string) string { return strings.ReplaceAll(flag, "-", "_") }

// EnvNames returns the environment variables that configure a flag, in
// order of precedence.
func EnvNames(program, flag string) []string {
	k := strings.ToUpper(ConfigKey(flag))
	return []string{strings.ToUpper(program) + "_" + k, "AGENTPLANE_" + k}
}

// configSource loads the config file (once) and answers lookups of a flag's
// configured value: the environment first, then the file (sources).
type configSource struct {
	v      *viper.Viper
	loaded bool
	err    error
	// The system-wide file, read once too (it is consulted for every
	// configurable flag).
	sys       *viper.Viper
	sysLoaded bool
	sysErr    error
	// read are the files read, by the path of their ConfigFile.
	read map[string]ctlfile.File
}

func (e *Env) config() (*viper.Viper, error) {
	if e.cfg.loaded {
		return e.cfg.v, e.cfg.err
	}
	e.cfg.loaded = true
	path, explicit := e.configPath()
	if path == "" {
		return nil, nil
	}
	e.cfg.v, e.cfg.err = e.readConfig(path, explicit)
	return e.cfg.v, e.cfg.err
}

// readConfig reads one config file: nil for a default one that does not
// exist, an error for an explicit one that does not. Which file was read
// is kept (ConfigRead).
func (e *Env) readConfig(path string, explicit bool) (*viper.Viper, error) {
	f, err := ctlfile.Read(path)
	if err != nil {
		if explicit || !errors.Is(err, fs.ErrNotExist) {
			return nil, result.Errorf(result.CodeInvalidConfig, "cannot read config file %s: %v", path, unwrapPath(err))
		}
		return nil, nil
	}
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(bytes.NewReader(f.Data)); err != nil {
		return nil, result.Errorf(result.CodeInvalidConfig, "cannot read config file %s: %v", path, err)
	}
	f.Data = nil
	if e.cfg.read == nil {
		e.cfg.read = map[string]ctlfile.File{}
	}
	e.cfg.read[path] = f
	return v, nil
}

// ConfigRead tells which file was read for the config file at path (one
// of ConfigFiles), if one was.
func (e *Env) ConfigRead(path string) (ctlfile.File, bool) {
	f, ok := e.cfg.read[path]
	return f, ok
}

// A Source is one place the operator's settings come from, on its own:
// the program's or agentplane's environment variables, or one config file.
type Source struct {
	Name string
	// lookup returns the flag's value here and where exactly it is (a
	// variable's name, a config key), or "" when the source gives none.
	lookup func(f *pflag.Flag) ([]string, string)
}

// Lookup returns the value the source gives the configurable flag f.
func (s Source) Lookup(f *pflag.Flag) ([]string, bool) {
	if f == nil || !hasAnnot(f, AnnotConfig) {
		return nil, false
	}
	v, where := s.lookup(f)
	return v, where != ""
}

// Sources returns every place that configures this invocation, each on
// its own, also those a more precedent one shadows: the program's
// environment variables (AGENTSH_...), agentplane's (AGENTPLANE_...) and
// every config file of ConfigFiles. A flag's configured value is the first
// source's that gives one (Configured); a rule that a call must not escape
// by choosing where settings come from (the sandbox lock: a variable set to
// 0, or --config naming another file) holds every source's. A shadowed file
// that does not exist is no source; one that cannot be read is an error.
func (e *Env) Sources() ([]Source, error) { return e.sources(true) }

// sources returns the environment's sources and the config file the
// invocation reads, and with all the files it shadows too.
func (e *Env) sources(all bool) ([]Source, error) {
	var out []Source
	for i, prefix := range []string{strings.ToUpper(e.Program.Name) + "_", "AGENTPLANE_"} {
		out = append(out, Source{Name: prefix + "* environment variables", lookup: func(f *pflag.Flag) ([]string, string) {
			// An empty variable counts as unset, as shells treat it.
			name := EnvNames(e.Program.Name, f.Name)[i]
			if s, ok := e.LookupEnv(name); ok && s != "" {
				return splitEnvValue(f, s), "environment variable " + name
			}
			return nil, ""
		}})
	}
	for i, file := range e.ConfigFiles() {
		// Settings come from the first file, then from the system-wide
		// one under it; the others only for rules that hold every
		// source's (all).
		if i > 0 && !all && !file.System {
			continue
		}
		var v *viper.Viper
		var err error
		switch {
		case i == 0:
			v, err = e.config()
		case file.System:
			if !e.cfg.sysLoaded {
				e.cfg.sysLoaded = true
				e.cfg.sys, e.cfg.sysErr = e.readConfig(file.Path, false)
			}
			v, err = e.cfg.sys, e.cfg.sysErr
		default:
			v, err = e.readConfig(file.Path, false)
		}
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		out = append(out, Source{Name: "config file " + file.Path, lookup: func(f *pflag.Flag) ([]string, string) {
			key := ConfigKey(f.Name)
			for _, k := range []string{e.Program.Name + "." + key, key} {
				if v.IsSet(k) {
					return configValues(v.Get(k)), "config key " + k
				}
			}
			return nil, ""
		}})
	}
	return out, nil
}

// lookupConfig returns a flag's value from the environment or config file
// (ignoring the command line and request), with where it came from.
func (e *Env) lookupConfig(f *pflag.Flag) ([]string, string, error) {
	sources, err := e.sources(false)
	if err != nil {
		return nil, "", err
	}
	for _, s := range sources {
		if v, where := s.lookup(f); where != "" {
			return v, where, nil
		}
	}
	return nil, "", nil
}

// Configured returns the value the environment or config file gives a
// configurable flag, whatever the command line said: the operator's
// setting, for checks that a call does not loosen it.
func (e *Env) Configured(cmd *cobra.Command, flag string) ([]string, bool) {
	f := cmd.Flags().Lookup(flag)
	if f == nil || !hasAnnot(f, AnnotConfig) {
		return nil, false
	}
	vals, source, err := e.lookupConfig(f)
	if err != nil || source == "" {
		return nil, false
	}
	return vals, true
}

// applyConfig fills configurable flags that are still unset from the
// environment, then from the config file.
func (e *Env) applyConfig(cmd *cobra.Command, set map[string]bool) error {
	var flags []*pflag.Flag
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if hasAnnot(f, AnnotConfig) && !f.Changed {
			flags = append(flags, f)
		}
	})
	for _, f := range flags {
		vals, source, err := e.lookupConfig(f)
		if err != nil {
			return err
		}
		if source == "" {
			continue
		}
		for _, s := range vals {
			if err := f.Value.Set(s); err != nil {
				return result.Errorf(result.CodeInvalidConfig, "%s: %v", source, err)
			}
		}
		f.Changed = true
	}
	return nil
}

// splitEnvValue splits a list-valued variable on commas (AGENTSH_ENV=A=1,B=2).
func splitEnvValue(f *pflag.Flag, s string) []string {
	switch f.Value.Type() {
	case "stringArray", "stringSlice":
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	return []string{s}
}

func configValues(v any) []string {
	switch t := v.(type) {
	case []any:
		out := make([]string, 0, len(t))
		for _, it := range t {
			out = append(out, fmt.Sprint(it))
		}
		return out
	case []string:
		return t
	case map[string]any:
		ks := make([]string, 0, len(t))
		for k := range t {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		out := make([]string, 0, len(t))
		for _, k := range ks {
			out = append(out, k+"="+fmt.Sprint(t[k]))
		}
		return out
	}
	return []string{fmt.Sprint(v)}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
