package proctree

import (
	"encoding/binary"
	"reflect"
	"testing"
)

func procargs(argc uint32, rest string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, argc)
	return append(b, rest...)
}

func TestParseProcArgs(t *testing.T) {
	cases := []struct {
		name     string
		in       []byte
		path     string
		argv     []string
		wantFail bool
	}{
		{"agentjob supervisor, padded, environment after",
			procargs(3, "/usr/local/bin/agentjob\x00\x00\x00\x00agentjob\x00__supervise\x00--state-dir=/x y\x00HOME=/Users/me\x00"),
			"/usr/local/bin/agentjob", []string{"agentjob", "__supervise", "--state-dir=/x y"}, false},
		{"no padding", procargs(1, "/bin/sh\x00sh\x00"), "/bin/sh", []string{"sh"}, false},
		{"empty argument kept", procargs(2, "/bin/x\x00x\x00\x00"), "/bin/x", []string{"x", ""}, false},
		{"argc larger than the record", procargs(5, "/bin/x\x00x\x00y"), "/bin/x", []string{"x", "y"}, false},
		{"hostile argc", procargs(0xffffffff, "/bin/x\x00x\x00"), "/bin/x", []string{"x"}, false},
		{"short", []byte{1, 0}, "", nil, true},
		{"no NUL after the path", procargs(1, "/bin/x"), "", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, argv, err := parseProcArgs(1, tc.in)
			if tc.wantFail {
				if err == nil {
					t.Fatalf("parsed %q %q, want an error", path, argv)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if path != tc.path || !reflect.DeepEqual(argv, tc.argv) {
				t.Fatalf("got %q %q, want %q %q", path, argv, tc.path, tc.argv)
			}
		})
	}
}
