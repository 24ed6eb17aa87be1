package confine

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// The spec's wire format: records of a field's name and one value, each
// ended by a NUL byte (which no path or argument can hold), every scalar
// field once, a list field once per element. The helper decodes it with
// no reflection: encoding/json's first decode of a type of this size was
// a quarter of a millisecond of every sandboxed call, and the runner's
// first encode half that. The last record is specEnd, with no value: a
// spec cut short at a record's end would otherwise decode, its missing
// fields zero, which is less confinement (no Landlock, the host's
// network, no hidden files).

// specField is one field of Spec on the wire: put adds its records, set
// takes one value.
type specField struct {
	name string
	put  func(sp *Spec, add func(string))
	set  func(sp *Spec, v string) error
}

func strField(name string, f func(*Spec) *string) specField {
	return specField{name,
		func(sp *Spec, add func(string)) { add(*f(sp)) },
		func(sp *Spec, v string) error { *f(sp) = v; return nil }}
}

func listField(name string, f func(*Spec) *[]string) specField {
	return specField{name,
		func(sp *Spec, add func(string)) {
			for _, v := range *f(sp) {
				add(v)
			}
		},
		func(sp *Spec, v string) error { *f(sp) = append(*f(sp), v); return nil }}
}

func intField(name string, f func(*Spec) *int) specField {
	return specField{name,
		func(sp *Spec, add func(string)) { add(strconv.Itoa(*f(sp))) },
		func(sp *Spec, v string) error {
			n, err := strconv.Atoi(v)
			*f(sp) = n
			return err
		}}
}

func boolField(name string, f func(*Spec) *bool) specField {
	return specField{name,
		func(sp *Spec, add func(string)) { add(strconv.FormatBool(*f(sp))) },
		func(sp *Spec, v string) error {
			b, err := strconv.ParseBool(v)
			*f(sp) = b
			return err
		}}
}

// specEnd names the spec's last record.
const specEnd = "end"

// specFields lists every field of Spec (TestSpecCodecRoundTrip fails on one
// left out); "v" comes first.
var specFields = []specField{
	intField("v", func(sp *Spec) *int { return &sp.V }),
	strField("status", func(sp *Spec) *string { return &sp.Status }),
	intField("landlock_abi", func(sp *Spec) *int { return &sp.LandlockABI }),
	listField("writable", func(sp *Spec) *[]string { return &sp.Writable }),
	listField("write_files", func(sp *Spec) *[]string { return &sp.WriteFiles }),
	listField("deny_dirs", func(sp *Spec) *[]string { return &sp.DenyDirs }),
	listField("deny_files", func(sp *Spec) *[]string { return &sp.DenyFiles }),
	listField("hidden", func(sp *Spec) *[]string { return &sp.Hidden }),
	boolField("net_none", func(sp *Spec) *bool { return &sp.NetNone }),
	intField("proxy_port", func(sp *Spec) *int { return &sp.ProxyPort }),
	listField("cgroups", func(sp *Spec) *[]string { return &sp.Cgroups }),
	{"rlimit",
		func(sp *Spec, add func(string)) {
			for _, r := range sp.Rlimits {
				add(strconv.Itoa(r.Resource) + " " + strconv.FormatUint(r.Cur, 10) + " " + strconv.FormatUint(r.Max, 10))
			}
		},
		func(sp *Spec, v string) error {
			f := strings.Split(v, " ")
			if len(f) != 3 {
				return fmt.Errorf("rlimit %q", v)
			}
			res, err1 := strconv.Atoi(f[0])
			cur, err2 := strconv.ParseUint(f[1], 10, 64)
			lim, err3 := strconv.ParseUint(f[2], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil {
				return fmt.Errorf("rlimit %q", v)
			}
			sp.Rlimits = append(sp.Rlimits, Rlimit{Resource: res, Cur: cur, Max: lim})
			return nil
		}},
	intField("uid", func(sp *Spec) *int { return &sp.UID }),
	intField("gid", func(sp *Spec) *int { return &sp.GID }),
	{"group",
		func(sp *Spec, add func(string)) {
			for _, g := range sp.Groups {
				add(strconv.Itoa(g))
			}
		},
		func(sp *Spec, v string) error {
			g, err := strconv.Atoi(v)
			sp.Groups = append(sp.Groups, g)
			return err
		}},
	boolField("drop_caps", func(sp *Spec) *bool { return &sp.DropCaps }),
	boolField("clear_ambient", func(sp *Spec) *bool { return &sp.ClearAmbient }),
	listField("seatbelt", func(sp *Spec) *[]string { return &sp.Seatbelt }),
	boolField("read_only_root", func(sp *Spec) *bool { return &sp.ReadOnlyRoot }),
	boolField("minimal_dev", func(sp *Spec) *bool { return &sp.MinimalDev }),
	listField("read_only", func(sp *Spec) *[]string { return &sp.ReadOnly }),
	boolField("drop_file_caps", func(sp *Spec) *bool { return &sp.DropFileCaps }),
	intField("keep_fds", func(sp *Spec) *int { return &sp.KeepFDs }),
	boolField("control", func(sp *Spec) *bool { return &sp.Control }),
	strField("acct", func(sp *Spec) *string { return &sp.Acct }),
	listField("temp_areas", func(sp *Spec) *[]string { return &sp.TempAreas }),
	strField("temp_dir", func(sp *Spec) *string { return &sp.TempDir }),
	listField("pinned", func(sp *Spec) *[]string { return &sp.Pinned }),
	boolField("report", func(sp *Spec) *bool { return &sp.Report }),
	idsField("writable_id", func(sp *Spec) *[]FileID { return &sp.WritableIDs }),
	idsField("write_file_id", func(sp *Spec) *[]FileID { return &sp.WriteFileIDs }),
	idsField("read_only_id", func(sp *Spec) *[]FileID { return &sp.ReadOnlyIDs }),
	idsField("hidden_id", func(sp *Spec) *[]FileID { return &sp.HiddenIDs }),
	listField("env", func(sp *Spec) *[]string { return &sp.Env }),
	listField("argv", func(sp *Spec) *[]string { return &sp.Argv }),
	listField("environ", func(sp *Spec) *[]string { return &sp.Environ }),
	strField("dir", func(sp *Spec) *string { return &sp.Dir }),
	intField("timer_slack", func(sp *Spec) *int { return &sp.TimerSlack }),
}

// idsField is a list of identities, each as "DEV INO".
func idsField(name string, f func(*Spec) *[]FileID) specField {
	return specField{name,
		func(sp *Spec, add func(string)) {
			for _, id := range *f(sp) {
				add(strconv.FormatUint(id.Dev, 10) + " " + strconv.FormatUint(id.Ino, 10))
			}
		},
		func(sp *Spec, v string) error {
			d, i, ok := strings.Cut(v, " ")
			dev, err1 := strconv.ParseUint(d, 10, 64)
			ino, err2 := strconv.ParseUint(i, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				return fmt.Errorf("identity %q", v)
			}
			*f(sp) = append(*f(sp), FileID{Dev: dev, Ino: ino})
			return nil
		}}
}

// EncodeSpec is the runner's half of the spec protocol. It fails on a
// value holding a NUL byte, which no path, argument or name can.
func EncodeSpec(sp Spec) ([]byte, error) {
	var b bytes.Buffer
	var bad string
	for i := range specFields {
		f := &specFields[i]
		f.put(&sp, func(v string) {
			if strings.IndexByte(v, 0) >= 0 {
				bad = f.name
			}
			b.WriteString(f.name)
			b.WriteByte(0)
			b.WriteString(v)
			b.WriteByte(0)
		})
	}
	if bad != "" {
		return nil, fmt.Errorf("the sandbox spec's %s holds a NUL byte", bad)
	}
	b.WriteString(specEnd + "\x00\x00")
	return b.Bytes(), nil
}

// decodeSpec reads EncodeSpec's records into sp: a field it does not know,
// a value it cannot read, a record cut short or a spec without its end
// record last is an error, never a field left out.
func decodeSpec(sp *Spec, data []byte) error {
	if !bytes.HasPrefix(data, []byte("v\x00")) {
		return fmt.Errorf("no version first")
	}
	for len(data) > 0 {
		name, rest, ok1 := bytes.Cut(data, []byte{0})
		value, rest, ok2 := bytes.Cut(rest, []byte{0})
		if !ok1 || !ok2 {
			return fmt.Errorf("a record cut short")
		}
		data = rest
		if string(name) == specEnd {
			if len(value) != 0 || len(data) != 0 {
				return fmt.Errorf("records after the end")
			}
			return nil
		}
		f := findSpecField(string(name))
		if f == nil {
			return fmt.Errorf("unknown field %q", name)
		}
		if err := f.set(sp, string(value)); err != nil {
			return fmt.Errorf("field %s: %v", name, err)
		}
	}
	return fmt.Errorf("no end record: the spec was cut short")
}

func findSpecField(name string) *specField {
	for i := range specFields {
		if specFields[i].name == name {
			return &specFields[i]
		}
	}
	return nil
}
