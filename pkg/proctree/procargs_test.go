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
		env      []string
		wantFail bool
	}{
		{"agentjob supervisor, padded, environment after",
			procargs(3, "/usr/local/bin/agentjob\x00\x00\x00\x00agentjob\x00__supervise\x00--state-dir=/x y\x00HOME=/Users/me\x00"),
			"/usr/local/bin/agentjob", []string{"agentjob", "__supervise", "--state-dir=/x y"}, []string{"HOME=/Users/me"}, false},
		{"environment, then apple[] after an empty string",
			procargs(1, "/bin/sh\x00\x00sh\x00A=1\x00AGENTPLANE_GUARD=ab:cd\x00\x00executable_path=/bin/sh\x00"),
			"/bin/sh", []string{"sh"}, []string{"A=1", "AGENTPLANE_GUARD=ab:cd"}, false},
		{"no padding", procargs(1, "/bin/sh\x00sh\x00"), "/bin/sh", []string{"sh"}, nil, false},
		{"empty argument kept", procargs(2, "/bin/x\x00x\x00\x00"), "/bin/x", []string{"x", ""}, nil, false},
		{"argc larger than the record", procargs(5, "/bin/x\x00x\x00y"), "/bin/x", []string{"x", "y"}, nil, false},
		{"hostile argc", procargs(0xffffffff, "/bin/x\x00x\x00"), "/bin/x", []string{"x"}, nil, false},
		{"short", []byte{1, 0}, "", nil, nil, true},
		{"no NUL after the path", procargs(1, "/bin/x"), "", nil, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, argv, env, err := parseProcArgs(1, tc.in)
			if tc.wantFail {
				if err == nil {
					t.Fatalf("parsed %q %q, want an error", path, argv)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if path != tc.path || !reflect.DeepEqual(argv, tc.argv) || !reflect.DeepEqual(env, tc.env) {
				t.Fatalf("got %q %q %q, want %q %q %q", path, argv, env, tc.path, tc.argv, tc.env)
			}
		})
	}
}
