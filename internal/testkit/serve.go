package testkit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdServe starts a server on 127.0.0.1 in the test process for the rest
// of the script, standing in for a host on the network:
//
//	serve NAME http              answers every path with "hello from NAME"
//	serve NAME https             the same over TLS (self-signed; $NAME_CA is its certificate)
//	serve NAME git DIR           git's smart HTTP protocol (git http-backend) for the repositories in DIR
//	serve NAME npm               an npm registry holding one package, agentplane-demo 1.0.0
//
// It sets $NAME_ADDR (127.0.0.1:port), $NAME_PORT and $NAME_URL.
func cmdServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: serve NAME http|https|git DIR|npm")
	}
	name, kind := args[0], args[1]
	var h http.Handler
	switch kind {
	case "http", "https":
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s\n", name)
		})
	case "git":
		if len(args) != 3 {
			ts.Fatalf("usage: serve NAME git DIR")
		}
		git, err := exec.LookPath("git")
		if err != nil {
			ts.Fatalf("serve: %v", err)
		}
		h = &cgi.Handler{Path: git, Args: []string{"http-backend"},
			Env: []string{"GIT_PROJECT_ROOT=" + ts.MkAbs(args[2]), "GIT_HTTP_EXPORT_ALL=1"}}
	case "npm":
		h = npmRegistry()
	default:
		ts.Fatalf("serve: unknown kind %q", kind)
	}
	var srv *httptest.Server
	if kind == "https" {
		srv = httptest.NewTLSServer(h)
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		path := filepath.Join(ts.Getenv("WORK"), name+"-ca.pem")
		if err := os.WriteFile(path, ca, 0o644); err != nil {
			ts.Fatalf("serve: %v", err)
		}
		ts.Setenv(name+"_CA", path)
	} else {
		srv = httptest.NewServer(h)
	}
	ts.Defer(srv.Close)
	addr := srv.Listener.Addr().String()
	ts.Setenv(name+"_ADDR", addr)
	ts.Setenv(name+"_PORT", addr[strings.LastIndex(addr, ":")+1:])
	ts.Setenv(name+"_URL", srv.URL)
}

// npmRegistry serves the packument and tarball of agentplane-demo.
func npmRegistry() http.Handler {
	const pkg, version = "agentplane-demo", "1.0.0"
	var tgz bytes.Buffer
	gz := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(gz)
	files := map[string]string{
		"package/package.json": `{"name":"` + pkg + `","version":"` + version + `","main":"index.js"}`,
		"package/index.js":     "module.exports = 'demo';\n",
	}
	for _, n := range []string{"package/package.json", "package/index.js"} {
		body := files[n]
		_ = tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(0, 0)})
		_, _ = tw.Write([]byte(body))
	}
	_ = tw.Close()
	_ = gz.Close()
	data := tgz.Bytes()
	s1 := sha1.Sum(data)
	s512 := sha512.Sum512(data)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := "http://" + r.Host
		switch r.URL.Path {
		case "/" + pkg:
			doc := map[string]any{
				"name":      pkg,
				"dist-tags": map[string]string{"latest": version},
				"versions": map[string]any{version: map[string]any{
					"name": pkg, "version": version,
					"dist": map[string]string{
						"tarball":   base + "/" + pkg + "/-/" + pkg + "-" + version + ".tgz",
						"shasum":    hex.EncodeToString(s1[:]),
						"integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:]),
					},
				}},
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(doc)
		case "/" + pkg + "/-/" + pkg + "-" + version + ".tgz":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			_, _ = w.Write(data)
		default:
			http.NotFound(w, r)
		}
	})
}
