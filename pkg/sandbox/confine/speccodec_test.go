package confine

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// filledSpec sets every field of a Spec to a value of its own, none the
// zero value, by reflection: a field the codec leaves out does not come
// back.
func filledSpec(t *testing.T) Spec {
	t.Helper()
	var sp Spec
	v := reflect.ValueOf(&sp).Elem()
	for i := 0; i < v.NumField(); i++ {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.String:
			f.SetString("/a path/for " + name + "\n")
		case reflect.Int:
			f.SetInt(int64(100 + i))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			n := 2 + i%2
			s := reflect.MakeSlice(f.Type(), n, n)
			for j := 0; j < n; j++ {
				switch e := s.Index(j); e.Kind() {
				case reflect.String:
					e.SetString(fmt.Sprintf("%s %d", name, j))
				case reflect.Int:
					e.SetInt(int64(j + i))
				case reflect.Struct:
					switch e.Interface().(type) {
					case Rlimit:
						e.Set(reflect.ValueOf(Rlimit{Resource: j + 1, Cur: uint64(j) << 40, Max: ^uint64(0) - uint64(j)}))
					case FileID:
						e.Set(reflect.ValueOf(FileID{Dev: uint64(j)<<40 + 1, Ino: ^uint64(0) - uint64(i)}))
					default:
						t.Fatalf("field %s: elements of type %s", name, e.Type())
					}
				default:
					t.Fatalf("field %s: elements of kind %s", name, e.Kind())
				}
			}
			f.Set(s)
		default:
			t.Fatalf("field %s of kind %s: teach filledSpec and the codec", name, f.Kind())
		}
	}
	return sp
}

func TestSpecCodecRoundTrip(t *testing.T) {
	for _, sp := range []Spec{filledSpec(t), {V: SpecVersion, UID: -1, GID: -1}} {
		data, err := EncodeSpec(sp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseSpec(data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, sp) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, sp)
		}
	}
}

// What is not a whole spec of this build is refused, never read in part.
func TestSpecCodecRefuses(t *testing.T) {
	good, err := EncodeSpec(Spec{V: SpecVersion, Status: "/s", Writable: []string{"/w"}, UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"empty":         nil,
		"cut short":     good[:len(good)-1],
		"no version":    bytes.TrimPrefix(good, []byte("v\x00"+fmt.Sprint(SpecVersion)+"\x00")),
		"unknown field": append(append([]byte(nil), good...), "writable_too\x00/etc\x00"...),
		"bad number":    append(append([]byte(nil), good...), "uid\x00zero\x00"...),
		"bad rlimit":    append(append([]byte(nil), good...), "rlimit\x001 2\x00"...),
	} {
		if _, err := ParseSpec(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := EncodeSpec(Spec{Writable: []string{"/a\x00/etc"}}); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Errorf("a NUL in a path: %v", err)
	}
	// An older runner's JSON spec still tells its version.
	sp, err := ParseSpec([]byte(`{"v":9,"status":"/s","uid":-1,"gid":-1}`))
	if err != nil || sp.V != 9 || sp.Status != "/s" {
		t.Errorf("JSON spec: %+v, %v", sp, err)
	}
}
